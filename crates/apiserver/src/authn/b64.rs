//! Unpadded base64url (RFC 4648 §5), the encoding of every JWS part and of the websocket
//! bearer subprotocol. Decoding is strict: padding, whitespace and the standard alphabet's
//! `+` and `/` are errors, as with Go's `base64.RawURLEncoding`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// `data` as unpadded base64url.
pub fn encode(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

/// The bytes of unpadded base64url `s`; None when `s` is not that.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length() {
        let data: Vec<u8> = (0..=255u8).collect();
        for n in 0..40 {
            let enc = encode(&data[..n]);
            assert!(!enc.contains('='));
            assert_eq!(decode(&enc).unwrap(), &data[..n]);
        }
    }

    #[test]
    fn uses_the_url_safe_alphabet() {
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
        assert_eq!(encode(b"hello"), "aGVsbG8");
    }

    #[test]
    fn rejects_padding_and_foreign_characters() {
        for bad in ["aGVsbG8=", "a+b/", "aGVs bG8", "a", "aGVsb", "é"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
