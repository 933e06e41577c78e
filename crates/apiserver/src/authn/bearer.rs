//! Where a bearer token travels, as Kubernetes' `request/bearertoken` (the `Authorization`
//! header) and `request/websocket` (a `Sec-WebSocket-Protocol` entry, for browsers' websockets,
//! which cannot set headers).

use http::HeaderMap;

use super::{b64, TokenAuthenticator, TokenResponse};

/// The websocket subprotocol prefix that carries a base64url bearer token.
pub const WEBSOCKET_PROTOCOL_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// The token of `Authorization: Bearer <token>`. The scheme is case-insensitive, a single space
/// separates it from the token and whatever follows another space is ignored; an empty token
/// is no credential.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let auth = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let mut parts = auth.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return None;
    }
    Some(token)
}

/// Whether the request asks to upgrade to a websocket (`Connection: upgrade` and
/// `Upgrade: websocket`).
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let first = |name: http::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    first(http::header::UPGRADE).eq_ignore_ascii_case("websocket")
        && first(http::header::CONNECTION)
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The bearer token of a websocket request's `Sec-WebSocket-Protocol` entries. None: not a
/// websocket request, or no token entry. Some(Err): more than one token entry, a token that is
/// not unpadded base64url of UTF-8, or no other subprotocol left to answer with.
pub fn websocket_token(headers: &HeaderMap) -> Option<Result<String, String>> {
    if !is_websocket_request(headers) {
        return None;
    }
    let mut token: Option<String> = None;
    let mut others = 0;
    for value in headers.get_all(http::header::SEC_WEBSOCKET_PROTOCOL) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for protocol in value.split(',').map(str::trim) {
            let Some(encoded) = protocol.strip_prefix(WEBSOCKET_PROTOCOL_PREFIX) else {
                others += 1;
                continue;
            };
            if token.is_some() {
                return Some(Err(
                    "multiple base64.bearer.authorization tokens specified".into()
                ));
            }
            let Some(bytes) = b64::decode(encoded) else {
                return Some(Err(
                    "invalid base64.bearer.authorization token encoding".into()
                ));
            };
            match String::from_utf8(bytes) {
                Ok(t) => token = Some(t),
                Err(_) => return Some(Err("invalid base64.bearer.authorization token".into())),
            }
        }
    }
    let token = token.filter(|t| !t.is_empty())?;
    if others == 0 {
        return Some(Err("missing additional subprotocol".into()));
    }
    Some(Ok(token))
}

/// Whether the request carries a bearer token in either place.
pub fn has_token(headers: &HeaderMap) -> bool {
    bearer_token(headers).is_some() || websocket_token(headers).is_some()
}

/// Authenticate a request's bearer token with `a`: the `Authorization` header first, then the
/// websocket subprotocol. None: no token, or no token `a` recognizes.
pub fn authenticate_request(
    a: &dyn TokenAuthenticator,
    headers: &HeaderMap,
    audiences: &[String],
) -> Option<Result<TokenResponse, String>> {
    let mut failure: Option<String> = None;
    if let Some(token) = bearer_token(headers) {
        match a.authenticate_token(token, audiences) {
            Some(Ok(r)) => return Some(Ok(r)),
            Some(Err(e)) => failure = Some(e),
            None => {}
        }
    }
    match websocket_token(headers) {
        Some(Ok(token)) => match a.authenticate_token(&token, audiences) {
            Some(Ok(r)) => return Some(Ok(r)),
            Some(Err(e)) => {
                failure.get_or_insert(e);
            }
            None => {}
        },
        Some(Err(e)) => {
            failure.get_or_insert(e);
        }
        None => {}
    }
    failure.map(Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn bearer_token_follows_kubernetes_parsing() {
        let cases = [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("  Bearer abc  ", Some("abc")),
            ("Bearer abc def", Some("abc")),
            ("Bearer  abc", None),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic abc", None),
            ("abc", None),
        ];
        for (value, want) in cases {
            let h = headers(&[("authorization", value)]);
            assert_eq!(bearer_token(&h), want, "{value:?}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    fn ws(protocols: &[&str]) -> HeaderMap {
        let mut pairs = vec![
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ];
        for p in protocols {
            pairs.push(("sec-websocket-protocol", p));
        }
        headers(&pairs)
    }

    #[test]
    fn websocket_token_is_read_from_the_subprotocol() {
        let entry = format!("{WEBSOCKET_PROTOCOL_PREFIX}{}", b64::encode(b"my-token"));
        let h = ws(&[&format!("v5.channel.k8s.io, {entry}")]);
        assert_eq!(websocket_token(&h), Some(Ok("my-token".to_string())));
        // The same entries split over two headers.
        let h = ws(&["v5.channel.k8s.io", &entry]);
        assert_eq!(websocket_token(&h), Some(Ok("my-token".to_string())));
    }

    #[test]
    fn websocket_token_rejects_malformed_entries() {
        let entry = format!("{WEBSOCKET_PROTOCOL_PREFIX}{}", b64::encode(b"t"));
        let cases = [
            vec![entry.clone()],
            vec![format!("v5.channel.k8s.io, {entry}, {entry}")],
            vec![format!(
                "v5.channel.k8s.io, {WEBSOCKET_PROTOCOL_PREFIX}dA=="
            )],
            vec![format!(
                "v5.channel.k8s.io, {WEBSOCKET_PROTOCOL_PREFIX}{}",
                b64::encode(&[0xff, 0xfe])
            )],
        ];
        for protocols in cases {
            let refs: Vec<&str> = protocols.iter().map(String::as_str).collect();
            assert!(
                matches!(websocket_token(&ws(&refs)), Some(Err(_))),
                "{protocols:?}"
            );
        }
    }

    #[test]
    fn websocket_token_needs_a_websocket_upgrade() {
        let entry = format!(
            "v5.channel.k8s.io, {WEBSOCKET_PROTOCOL_PREFIX}{}",
            b64::encode(b"t")
        );
        let h = headers(&[("sec-websocket-protocol", &entry)]);
        assert_eq!(websocket_token(&h), None);
        assert_eq!(websocket_token(&ws(&["v5.channel.k8s.io"])), None);
    }
}
