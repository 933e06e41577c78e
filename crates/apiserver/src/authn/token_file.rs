//! Static tokens from `--token-auth-file`, as Kubernetes' `authentication/token/tokenfile`: a
//! CSV file of `token,user,uid[,"group1,group2"]` records, read with the rules of Go's
//! `encoding/csv` (quoted fields, `""` escapes, blank lines skipped, no comment syntax).

use std::collections::HashMap;
use std::path::Path;

use http::HeaderMap;

use super::{bearer, TokenAuthenticator, TokenResponse};
use crate::auth::{Authenticator, ConnInfo, User};

/// The users of a token file, by token.
#[derive(Clone, Default)]
pub struct TokenFile {
    tokens: HashMap<String, User>,
}

/// Tokens are credentials: never printed.
impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl TokenFile {
    /// Read and parse the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<TokenFile, String> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading token file {}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse token file contents; `path` names the file in messages. Every record needs at
    /// least 3 columns; a record with an empty token is skipped and a repeated token replaces
    /// the earlier one, each with a warning.
    pub fn parse(text: &str, path: &str) -> Result<TokenFile, String> {
        let mut tokens = HashMap::new();
        for (number, record) in read_csv(text)?.into_iter().enumerate() {
            let number = number + 1;
            if record.len() < 3 {
                return Err(format!(
                    "token file '{path}' must have at least 3 columns (token, user name, user \
                     uid), found {}",
                    record.len()
                ));
            }
            if record[0].is_empty() {
                tracing::warn!(
                    "empty token has been found in token file '{path}', record number '{number}'"
                );
                continue;
            }
            // As in Kubernetes, an empty fourth column is one empty group name.
            let groups = record
                .get(3)
                .map(|g| g.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            let user = User {
                name: record[1].clone(),
                uid: record[2].clone(),
                groups,
                ..Default::default()
            };
            if tokens.insert(record[0].clone(), user).is_some() {
                tracing::warn!(
                    "duplicate token has been found in token file '{path}', record number '{number}'"
                );
            }
        }
        Ok(TokenFile { tokens })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl TokenAuthenticator for TokenFile {
    fn authenticate_token(
        &self,
        token: &str,
        _audiences: &[String],
    ) -> Option<Result<TokenResponse, String>> {
        let user = self.tokens.get(token)?;
        Some(Ok(TokenResponse {
            user: user.clone(),
            audiences: Vec::new(),
        }))
    }
}

impl Authenticator for TokenFile {
    fn authenticate(&self, headers: &HeaderMap, _conn: &ConnInfo) -> Option<Result<User, String>> {
        bearer::authenticate_request(self, headers, &[]).map(|r| r.map(|r| r.user))
    }
}

/// Lines of a text with `\r\n` read as `\n` and a final `\r` dropped, as Go's csv reader
/// sees them. Each line keeps its `\n` (the last may have none).
struct Lines<'a> {
    rest: &'a str,
    number: usize,
}

impl Lines<'_> {
    fn next_line(&mut self) -> Option<String> {
        if self.rest.is_empty() {
            return None;
        }
        self.number += 1;
        let (line, rest) = match self.rest.find('\n') {
            Some(i) => self.rest.split_at(i + 1),
            None => (self.rest, ""),
        };
        self.rest = rest;
        let line = match line.strip_suffix("\r\n") {
            Some(l) => format!("{l}\n"),
            None if !line.ends_with('\n') => line.strip_suffix('\r').unwrap_or(line).to_string(),
            None => line.to_string(),
        };
        Some(line)
    }
}

fn parse_error(start: usize, line: usize, column: usize, what: &str) -> String {
    if start == line {
        format!("parse error on line {line}, column {column}: {what}")
    } else {
        format!("record on line {start}; parse error on line {line}, column {column}: {what}")
    }
}

const BARE_QUOTE: &str = "bare \" in non-quoted-field";
const QUOTE: &str = "extraneous or missing \" in quoted-field";

/// The records of a CSV text: `,`-separated fields, a field starting with `"` is quoted (it
/// may hold `,`, newlines and `""` for a quote), a quote anywhere else is an error, and empty
/// lines are skipped.
fn read_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut lines = Lines {
        rest: text,
        number: 0,
    };
    let mut records = Vec::new();
    while let Some(first) = lines.next_line() {
        if first.is_empty() || first == "\n" {
            continue;
        }
        let start = lines.number;
        let mut line = first;
        let mut pos = 0;
        let mut fields = Vec::new();
        'fields: loop {
            if !line[pos..].starts_with('"') {
                let rest = &line[pos..];
                let (field, next) = match rest.find(',') {
                    Some(i) => (&rest[..i], Some(pos + i + 1)),
                    None => (rest.strip_suffix('\n').unwrap_or(rest), None),
                };
                if let Some(q) = field.find('"') {
                    return Err(parse_error(start, lines.number, pos + q + 1, BARE_QUOTE));
                }
                fields.push(field.to_string());
                match next {
                    Some(n) => pos = n,
                    None => break 'fields,
                }
                continue;
            }
            pos += 1;
            let mut field = String::new();
            loop {
                let rest = &line[pos..];
                if let Some(i) = rest.find('"') {
                    field.push_str(&rest[..i]);
                    pos += i + 1;
                    let after = &line[pos..];
                    if after.starts_with('"') {
                        field.push('"');
                        pos += 1;
                    } else if after.starts_with(',') {
                        pos += 1;
                        fields.push(field);
                        continue 'fields;
                    } else if after.is_empty() || after == "\n" {
                        fields.push(field);
                        break 'fields;
                    } else {
                        return Err(parse_error(start, lines.number, pos, QUOTE));
                    }
                } else if !rest.is_empty() {
                    field.push_str(rest);
                    match lines.next_line() {
                        Some(next) => {
                            line = next;
                            pos = 0;
                        }
                        None => {
                            return Err(parse_error(start, lines.number, line.len() + 1, QUOTE))
                        }
                    }
                } else {
                    return Err(parse_error(start, lines.number, pos + 1, QUOTE));
                }
            }
        }
        records.push(fields);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, uid: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn lookup(file: &TokenFile, token: &str) -> Option<User> {
        file.authenticate_token(token, &[]).map(|r| r.unwrap().user)
    }

    #[test]
    fn parses_kubernetes_token_file_records() {
        let text = "token1,user1,uid1\n\
                    token2,user2,uid2,\"group1,group2\"\r\n\
                    \n\
                    token3,user3,uid3,group3\n\
                    token4,user4,uid4,\"\"\n\
                    \"tok,en5\",\"us\"\"er5\",uid5,g,extra-column\n\
                    token6,\"multi\nline\",uid6";
        let file = TokenFile::parse(text, "tokens.csv").unwrap();
        assert_eq!(file.len(), 6);
        assert_eq!(lookup(&file, "token1"), Some(user("user1", "uid1", &[])));
        assert_eq!(
            lookup(&file, "token2"),
            Some(user("user2", "uid2", &["group1", "group2"]))
        );
        assert_eq!(
            lookup(&file, "token3"),
            Some(user("user3", "uid3", &["group3"]))
        );
        assert_eq!(lookup(&file, "token4"), Some(user("user4", "uid4", &[""])));
        assert_eq!(
            lookup(&file, "tok,en5"),
            Some(user("us\"er5", "uid5", &["g"]))
        );
        assert_eq!(
            lookup(&file, "token6"),
            Some(user("multi\nline", "uid6", &[]))
        );
        assert_eq!(lookup(&file, "token7"), None);
        assert_eq!(lookup(&file, ""), None);
    }

    #[test]
    fn empty_tokens_are_skipped_and_duplicates_replace() {
        let file = TokenFile::parse(",user0,uid0\ndup,first,1\ndup,second,2\n", "f").unwrap();
        assert_eq!(file.len(), 1);
        assert_eq!(lookup(&file, "dup").unwrap().name, "second");
    }

    #[test]
    fn empty_file_has_no_tokens() {
        assert!(TokenFile::parse("", "f").unwrap().is_empty());
        assert!(TokenFile::parse("\n\r\n\n", "f").unwrap().is_empty());
    }

    #[test]
    fn rejects_malformed_files() {
        let cases = [
            ("token,user\n", "must have at least 3 columns"),
            ("# a comment\n", "must have at least 3 columns"),
            ("   \n", "found 1"),
            ("tok\"en,user,uid\n", "bare \""),
            ("\"token\"x,user,uid\n", "extraneous or missing"),
            ("\"token,user,uid\n", "extraneous or missing"),
            ("a,b,c\nt,u,\"i\"d\n", "line 2"),
        ];
        for (text, want) in cases {
            let err = TokenFile::parse(text, "tokens.csv").unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn load_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "secret,admin,1,system:masters\n").unwrap();
        let file = TokenFile::load(&path).unwrap();
        assert_eq!(
            lookup(&file, "secret"),
            Some(user("admin", "1", &["system:masters"]))
        );
        assert!(TokenFile::load(dir.path().join("missing.csv")).is_err());
    }

    #[test]
    fn request_authenticator_reads_the_bearer_header() {
        let file = TokenFile::parse("secret,admin,1\n", "f").unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            "Bearer secret".parse().unwrap(),
        );
        let got = Authenticator::authenticate(&file, &h, &ConnInfo::default());
        assert_eq!(got.unwrap().unwrap().name, "admin");
        h.insert(http::header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_eq!(
            Authenticator::authenticate(&file, &h, &ConnInfo::default()),
            None
        );
    }
}
