//! A stored object's JSON read as byte ranges, without building it: the members of an object,
//! each key (still escaped) and its value's bytes. A binding changes two small parts of a pod
//! and copies everything else as it is stored (see `pods::bind_stored`).

/// The members of the JSON object in `json`: each key's bytes between its quotes (still
/// escaped) and its value's bytes. None when `json` is not one well-formed object.
pub fn members(json: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut i = ws(json, 0);
    if json.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(json, i + 1);
    let mut out = Vec::new();
    if json.get(i) == Some(&b'}') {
        return (ws(json, i + 1) == json.len()).then_some(out);
    }
    loop {
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(json, i)?;
        let key = &json[i + 1..key_end - 1];
        i = ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(json, i + 1);
        let end = value_end(json, start)?;
        out.push((key, &json[start..end]));
        i = ws(json, end);
        match json.get(i) {
            Some(b',') => i = ws(json, i + 1),
            Some(b'}') => return (ws(json, i + 1) == json.len()).then_some(out),
            _ => return None,
        }
    }
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
        match b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
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
