//! A stored object's JSON read as byte ranges, without building it: the members of an object,
//! each key (still escaped) and its value's bytes. A binding changes two small parts of a pod
//! and copies everything else as it is stored (see `pods::bind_stored`).

/// The members of the JSON object in `json`: each key's bytes between its quotes (still
/// escaped) and its value's bytes. None when `json` is not one well-formed object.
pub fn members(json: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut it = Members::new(json)?;
    let out = it
        .by_ref()
        .map(|m| (&json[m.key], &json[m.value]))
        .collect();
    it.complete.then_some(out)
}

/// Where one member of an object is in its JSON.
#[derive(Debug)]
struct Span {
    /// The key's bytes between its quotes.
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

/// The members of an object one by one, each scanned only when asked for: a caller that
/// stops early does not read the rest (a pod's spec and status, after its metadata).
struct Members<'a> {
    json: &'a [u8],
    /// Where the next member's key starts; None once done or on malformed JSON.
    at: Option<usize>,
    /// The closing brace was reached and nothing follows it.
    complete: bool,
}

impl<'a> Members<'a> {
    fn new(json: &'a [u8]) -> Option<Self> {
        let i = ws(json, 0);
        if json.get(i) != Some(&b'{') {
            return None;
        }
        let i = ws(json, i + 1);
        if json.get(i) == Some(&b'}') {
            return Some(Members {
                json,
                at: None,
                complete: ws(json, i + 1) == json.len(),
            });
        }
        Some(Members {
            json,
            at: Some(i),
            complete: false,
        })
    }
}

impl Iterator for Members<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let json = self.json;
        let mut i = self.at.take()?;
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(json, i)?;
        let key = i + 1..key_end - 1;
        i = ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(json, i + 1);
        let end = value_end(json, start)?;
        i = ws(json, end);
        match json.get(i) {
            Some(b',') => self.at = Some(ws(json, i + 1)),
            Some(b'}') => self.complete = ws(json, i + 1) == json.len(),
            _ => return None,
        }
        Some(Span {
            key,
            value: start..end,
        })
    }
}

/// The bytes to cut from the object whose members are `members` to drop its member `key` (an
/// unescaped key) and leave a well-formed object: the member with the comma after it, or,
/// for the last member, the comma before it. Members after the next one are not read.
fn member_cut(json: &[u8], mut members: Members<'_>, key: &[u8]) -> Option<std::ops::Range<usize>> {
    let mut prev: Option<Span> = None;
    while let Some(m) = members.next() {
        if &json[m.key.clone()] != key {
            prev = Some(m);
            continue;
        }
        let start = m.key.start - 1;
        return match (members.next(), prev) {
            (Some(next), _) => Some(start..next.key.start - 1),
            (None, _) if !members.complete => None,
            (None, Some(prev)) => Some(prev.value.end..m.value.end),
            (None, None) => Some(start..m.value.end),
        };
    }
    None
}

/// The bytes to cut from a stored object to drop its `metadata.managedFields`, for clients
/// that never read them (the scheduler's informers, as kube-scheduler trims them): parsing a
/// pod's managedFields took a third of the time its informer spent on each pod. Only the
/// object's members up to its metadata are read, and the metadata up to the member after
/// managedFields.
pub fn managed_fields_cut(json: &[u8]) -> Option<std::ops::Range<usize>> {
    let md = Members::new(json)?.find(|m| &json[m.key.clone()] == b"metadata")?;
    let body = &json[md.value.clone()];
    let cut = member_cut(body, Members::new(body)?, b"managedFields")?;
    Some(md.value.start + cut.start..md.value.start + cut.end)
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Just past the string whose opening quote is at `i`.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        match b[i] {
            b'"' => return Some(i + 1),
            _ => i += 2,
        }
    }
}

/// Just past the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_the_keys_and_the_bytes_of_their_values() {
        let json = br#"{"a":1,"b" : {"x":[1,{"y":"}"}],"z":"q\"]"} ,"c\"d":"e","f":[],"g":null}"#;
        let m = members(json).unwrap();
        let keys: Vec<&[u8]> = m.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", br#"c\"d"#, b"f", b"g"]);
        assert_eq!(m[1].1, br#"{"x":[1,{"y":"}"}],"z":"q\"]"}"#);
        assert_eq!(m[2].1, br#""e""#);
        assert_eq!(m[3].1, b"[]");
        assert_eq!(m[4].1, b"null");
        assert_eq!(members(b" {} ").unwrap().len(), 0);
    }

    #[test]
    fn managed_fields_are_cut_leaving_the_same_object_without_them() {
        let cases = [
            r#"{"apiVersion":"v1","metadata":{"name":"p","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{"}":{}}}}],"uid":"u"},"spec":{}}"#,
            r#"{"metadata":{"managedFields":[],"name":"p"}}"#,
            r#"{"metadata":{"name":"p","managedFields":[{"a":"]"}]}}"#,
            r#"{"metadata":{"managedFields":[{"a":1}]}}"#,
            r#"{"metadata" : { "name" : "p" , "managedFields" : [ 1 ] , "x" : 2 } }"#,
            r#"{"spec":{"managedFields":1},"metadata":{"name":"p","managedFields":null}}"#,
        ];
        for json in cases {
            let cut = managed_fields_cut(json.as_bytes()).unwrap();
            let mut out = json.as_bytes().to_vec();
            out.drain(cut);
            let mut want: serde_json::Value = serde_json::from_str(json).unwrap();
            want["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            let got: serde_json::Value = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{json}: {e}: {}", String::from_utf8_lossy(&out)));
            assert_eq!(got, want, "{json}");
        }
        for none in [
            r#"{"metadata":{"name":"p"}}"#,
            r#"{"spec":{"managedFields":[]}}"#,
            r#"{"metadata":{"managedFields":[}}"#,
            r#"{"metadata":{"managedField":[]}}"#,
            "[]",
        ] {
            assert_eq!(managed_fields_cut(none.as_bytes()), None, "{none}");
        }
    }

    #[test]
    fn anything_but_one_object_is_refused() {
        for bad in [
            &b"[1]"[..],
            b"{\"a\":1",
            b"{\"a\":1}x",
            b"{\"a\" 1}",
            b"{\"a\":{\"b\":1}",
            b"{\"a\":\"unterminated}",
            b"{a:1}",
            b"{\"a\":}",
            b"",
        ] {
            assert!(members(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
