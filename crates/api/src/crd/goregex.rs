//! Go `regexp` patterns (RE2 syntax) on top of the `regex` crate.
//!
//! Kubernetes compiles `pattern` with Go's `regexp.Compile`, whose syntax errors are part of
//! the API (`error parsing regexp: missing closing ): `(a``). [`compile`] first checks the
//! pattern the way Go's parser walks it, reporting the first error with Go's wording, then
//! translates the few places where the two dialects mean different things (Go's `\d`, `\w`,
//! `\s` and `\b` are ASCII-only; Go has `\Q...\E` and octal escapes; the `regex` crate reads
//! `[`, `&&`, `--` and `~~` inside classes as set operations) and compiles that.

use regex::Regex;

/// A Go regexp syntax error: `error parsing regexp: <code>: `<expr>``.
fn go_error(code: &str, expr: &str) -> String {
    format!("error parsing regexp: {code}: `{expr}`")
}

const MISSING_PAREN: &str = "missing closing )";
const UNEXPECTED_PAREN: &str = "unexpected )";
const MISSING_BRACKET: &str = "missing closing ]";
const INVALID_ESCAPE: &str = "invalid escape sequence";
const TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";
const MISSING_REPEAT_ARG: &str = "missing argument to repetition operator";
const INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const INVALID_CHAR_RANGE: &str = "invalid character class range";
const INVALID_NAMED_CAPTURE: &str = "invalid named capture";

/// Compile a Go pattern, or return Go's error text for it.
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    let translated = Translator::new(pattern).run()?;
    Regex::new(&translated).map_err(|e| {
        // The pattern is valid RE2 as far as the checks above go; whatever the regex crate
        // still rejects (e.g. size limits) is reported in Go's generic form.
        let detail = e.to_string();
        let last = detail.lines().last().unwrap_or("").trim();
        go_error(
            INVALID_PERL_OP,
            last.strip_prefix("error: ").unwrap_or(pattern),
        )
    })
}

/// What came last in the current concatenation, for the repetition checks.
#[derive(Clone, Copy, PartialEq)]
enum Last {
    /// Nothing to repeat: start of the pattern, after `(` or `|`.
    Nothing,
    /// An operand (literal, class, group, ...).
    Operand,
    /// A repetition operator starting at this byte offset.
    Repeat(usize),
}

struct Translator<'a> {
    src: &'a str,
    pos: usize,
    out: String,
    depth: usize,
    last: Last,
}

impl<'a> Translator<'a> {
    fn new(src: &'a str) -> Self {
        Translator {
            src,
            pos: 0,
            out: String::with_capacity(src.len() + 16),
            depth: 0,
            last: Last::Nothing,
        }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn run(mut self) -> Result<String, String> {
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '(' => self.open_group()?,
                ')' => {
                    if self.depth == 0 {
                        return Err(go_error(UNEXPECTED_PAREN, self.src));
                    }
                    self.depth -= 1;
                    self.pos += 1;
                    self.out.push(')');
                    self.last = Last::Operand;
                }
                '|' => {
                    self.pos += 1;
                    self.out.push('|');
                    self.last = Last::Nothing;
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    // A lazy marker after a repetition.
                    let lazy = self.peek() == Some('?');
                    if lazy {
                        self.pos += 1;
                    }
                    self.repeat(start, &self.src[start..self.pos])?;
                }
                '{' => match parse_repeat(self.rest()) {
                    Some((len, min, max)) => {
                        let mut end = start + len;
                        if self.src[end..].starts_with('?') {
                            end += 1;
                        }
                        self.pos = end;
                        let text = &self.src[start..end];
                        if min > 1000 || max.is_some_and(|m| m > 1000 || m < min) {
                            return Err(go_error(
                                INVALID_REPEAT_SIZE,
                                &self.src[start..start + len],
                            ));
                        }
                        self.repeat(start, text)?;
                    }
                    None => {
                        // Not a repetition: a literal brace.
                        self.pos += 1;
                        self.out.push_str("\\{");
                        self.last = Last::Operand;
                    }
                },
                '[' => self.class()?,
                '\\' => self.escape()?,
                '^' | '$' => {
                    // Wrapped, so that a repetition of it stays valid for the regex crate.
                    self.pos += 1;
                    self.out.push_str(if c == '^' { "(?:^)" } else { "(?:$)" });
                    self.last = Last::Operand;
                }
                '.' => {
                    self.pos += 1;
                    self.out.push('.');
                    self.last = Last::Operand;
                }
                _ => {
                    self.pos += c.len_utf8();
                    push_literal(&mut self.out, c);
                    self.last = Last::Operand;
                }
            }
        }
        if self.depth > 0 {
            return Err(go_error(MISSING_PAREN, self.src));
        }
        Ok(self.out)
    }

    /// A repetition operator `text` starting at `start`.
    fn repeat(&mut self, start: usize, text: &str) -> Result<(), String> {
        match self.last {
            Last::Nothing => return Err(go_error(MISSING_REPEAT_ARG, text)),
            Last::Repeat(prev) => {
                return Err(go_error(INVALID_REPEAT_OP, &self.src[prev..self.pos]));
            }
            Last::Operand => {}
        }
        self.out.push_str(text);
        self.last = Last::Repeat(start);
        Ok(())
    }

    fn open_group(&mut self) -> Result<(), String> {
        let rest = self.rest();
        if !rest.starts_with("(?") {
            self.pos += 1;
            self.depth += 1;
            self.out.push('(');
            self.last = Last::Nothing;
            return Ok(());
        }
        // Named captures: (?P<name>...) and (?<name>...).
        let name_start = if rest.starts_with("(?P<") {
            Some(4)
        } else if rest.starts_with("(?<") {
            Some(3)
        } else {
            None
        };
        if let Some(skip) = name_start {
            let Some(close) = rest.find('>') else {
                return Err(go_error(INVALID_NAMED_CAPTURE, rest));
            };
            let name = &rest[skip..close];
            let valid = !name.is_empty()
                && name.chars().all(|c| c == '_' || c.is_alphanumeric())
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(go_error(INVALID_NAMED_CAPTURE, &rest[..=close]));
            }
            self.out.push_str("(?P<");
            self.out.push_str(name);
            self.out.push('>');
            self.pos += close + 1;
            self.depth += 1;
            self.last = Last::Nothing;
            return Ok(());
        }
        // Flags: (?flags) or (?flags:...).
        let mut end = 2;
        let mut sign_seen = false;
        let mut flag_seen = false;
        for c in rest[2..].chars() {
            match c {
                'i' | 'm' | 's' | 'U' => {
                    flag_seen = true;
                    end += 1;
                }
                '-' if !sign_seen => {
                    sign_seen = true;
                    flag_seen = false;
                    end += 1;
                }
                ':' | ')' => {
                    // "(?-)" and "(?i-)" are errors in Go.
                    if sign_seen && !flag_seen {
                        return Err(go_error(INVALID_PERL_OP, &rest[..=end]));
                    }
                    let group = c == ':';
                    // "(?)" sets no flag: Go accepts it, the regex crate does not.
                    if group || end > 2 {
                        self.out.push_str(&rest[..=end]);
                    }
                    self.pos += end + 1;
                    if group {
                        self.depth += 1;
                        self.last = Last::Nothing;
                    }
                    return Ok(());
                }
                _ => {
                    let upto = end + c.len_utf8();
                    return Err(go_error(INVALID_PERL_OP, &rest[..upto]));
                }
            }
        }
        Err(go_error(INVALID_PERL_OP, rest))
    }

    /// A character class `[...]`.
    fn class(&mut self) -> Result<(), String> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::from("[");
        if self.peek() == Some('^') {
            self.pos += 1;
            out.push('^');
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err(go_error(MISSING_BRACKET, &self.src[start..]));
            };
            if c == ']' && !first {
                self.pos += 1;
                break;
            }
            first = false;
            let item_start = self.pos;
            // POSIX classes.
            if self.rest().starts_with("[:") {
                if let Some(end) = self.rest().find(":]") {
                    let name = &self.rest()[2..end];
                    let name = name.strip_prefix('^').unwrap_or(name);
                    if !POSIX_CLASSES.contains(&name) {
                        return Err(go_error(INVALID_CHAR_RANGE, &self.rest()[..end + 2]));
                    }
                    out.push_str(&self.rest()[..end + 2]);
                    self.pos += end + 2;
                    continue;
                }
            }
            let lo = if c == '\\' {
                match self.class_escape()? {
                    ClassItem::Char(ch) => ch,
                    ClassItem::Set(set) => {
                        out.push_str(&set);
                        continue;
                    }
                }
            } else {
                self.pos += c.len_utf8();
                c
            };
            // A range?
            if self.peek() == Some('-')
                && !self.rest()[1..].starts_with(']')
                && self.rest().len() > 1
            {
                self.pos += 1;
                let hi = match self.peek() {
                    Some('\\') => match self.class_escape()? {
                        ClassItem::Char(ch) => ch,
                        ClassItem::Set(_) => {
                            return Err(go_error(
                                INVALID_CHAR_RANGE,
                                &self.src[item_start..self.pos],
                            ));
                        }
                    },
                    Some(h) => {
                        self.pos += h.len_utf8();
                        h
                    }
                    None => return Err(go_error(MISSING_BRACKET, &self.src[start..])),
                };
                if hi < lo {
                    return Err(go_error(
                        INVALID_CHAR_RANGE,
                        &self.src[item_start..self.pos],
                    ));
                }
                push_class_char(&mut out, lo);
                out.push('-');
                push_class_char(&mut out, hi);
                continue;
            }
            push_class_char(&mut out, lo);
        }
        out.push(']');
        self.out.push_str(&out);
        self.last = Last::Operand;
        Ok(())
    }

    /// An escape inside a class: a single character or a whole set (`\d`, `\pL`).
    fn class_escape(&mut self) -> Result<ClassItem, String> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek() else {
            return Err(go_error(TRAILING_BACKSLASH, ""));
        };
        self.pos += c.len_utf8();
        let set = match c {
            'd' => Some("0-9".to_string()),
            'D' => Some("[^0-9]".to_string()),
            's' => Some("\\t\\n\\x0C\\r ".to_string()),
            'S' => Some("[^\\t\\n\\x0C\\r ]".to_string()),
            'w' => Some("0-9A-Za-z_".to_string()),
            'W' => Some("[^0-9A-Za-z_]".to_string()),
            'p' | 'P' => Some(self.unicode_class(start, c == 'P')?),
            _ => None,
        };
        if let Some(set) = set {
            return Ok(ClassItem::Set(set));
        }
        self.pos = start;
        let ch = self.escaped_char()?;
        Ok(ClassItem::Char(ch))
    }

    /// `\pL`, `\p{Greek}`, `\PL`: returns the class text for the regex crate.
    fn unicode_class(&mut self, start: usize, negated: bool) -> Result<String, String> {
        let name = if self.peek() == Some('{') {
            let Some(close) = self.rest().find('}') else {
                return Err(go_error(INVALID_CHAR_RANGE, &self.src[start..]));
            };
            let name = &self.rest()[1..close];
            self.pos += close + 1;
            name.to_string()
        } else {
            let Some(c) = self.peek() else {
                return Err(go_error(INVALID_CHAR_RANGE, &self.src[start..]));
            };
            self.pos += c.len_utf8();
            c.to_string()
        };
        let (neg, name) = match name.strip_prefix('^') {
            Some(n) => (!negated, n.to_string()),
            None => (negated, name),
        };
        let text = format!("\\{}{{{}}}", if neg { 'P' } else { 'p' }, name);
        if name == "Any" {
            return Ok(if neg {
                "[^\\x00-\\x{10FFFF}]".into()
            } else {
                "\\x00-\\x{10FFFF}".into()
            });
        }
        // Let the regex crate say whether it knows the class; Go knows the same general
        // categories and scripts.
        if Regex::new(&text).is_err() {
            return Err(go_error(INVALID_CHAR_RANGE, &self.src[start..self.pos]));
        }
        Ok(text)
    }

    /// An escape outside a class.
    fn escape(&mut self) -> Result<(), String> {
        let start = self.pos;
        let Some(c) = self.rest()[1..].chars().next() else {
            return Err(go_error(TRAILING_BACKSLASH, ""));
        };
        match c {
            'A' | 'z' => {
                self.pos += 2;
                self.out
                    .push_str(if c == 'A' { "(?:\\A)" } else { "(?:\\z)" });
                self.last = Last::Operand;
            }
            'b' | 'B' => {
                // Go's word boundaries are ASCII.
                self.pos += 2;
                self.out
                    .push_str(if c == 'b' { "(?-u:\\b)" } else { "(?-u:\\B)" });
                self.last = Last::Operand;
            }
            'd' | 'D' | 's' | 'S' | 'w' | 'W' => {
                self.pos += 2;
                let class = match c {
                    'd' => "[0-9]",
                    'D' => "[^0-9]",
                    's' => "[\\t\\n\\x0C\\r ]",
                    'S' => "[^\\t\\n\\x0C\\r ]",
                    'w' => "[0-9A-Za-z_]",
                    _ => "[^0-9A-Za-z_]",
                };
                self.out.push_str(class);
                self.last = Last::Operand;
            }
            'p' | 'P' => {
                self.pos += 2;
                let set = self.unicode_class(start, c == 'P')?;
                if set.starts_with('[') {
                    self.out.push_str(&set);
                } else {
                    self.out.push('[');
                    self.out.push_str(&set);
                    self.out.push(']');
                }
                self.last = Last::Operand;
            }
            'Q' => {
                self.pos += 2;
                let lit = match self.rest().find("\\E") {
                    Some(end) => {
                        let lit = &self.rest()[..end];
                        self.pos += end + 2;
                        lit
                    }
                    None => {
                        let lit = self.rest();
                        self.pos = self.src.len();
                        lit
                    }
                };
                for ch in lit.chars() {
                    push_literal(&mut self.out, ch);
                }
                if !lit.is_empty() {
                    self.last = Last::Operand;
                }
            }
            _ => {
                let ch = self.escaped_char()?;
                push_literal(&mut self.out, ch);
                self.last = Last::Operand;
            }
        }
        Ok(())
    }

    /// A single-character escape at the current `\`: `\n`, `\x41`, `\x{263a}`, `\101`, `\.`.
    fn escaped_char(&mut self) -> Result<char, String> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek() else {
            return Err(go_error(TRAILING_BACKSLASH, ""));
        };
        self.pos += c.len_utf8();
        let bad = |t: &Self| Err(go_error(INVALID_ESCAPE, &t.src[start..t.pos]));
        match c {
            '1'..='7'
                if !self.rest().starts_with(|d: char| ('0'..='7').contains(&d)) && c != '0' =>
            {
                // Backreferences do not exist in RE2.
                bad(self)
            }
            '0'..='7' => {
                // Octal: up to three digits.
                let mut value = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            self.pos += 1;
                        }
                        None => break,
                    }
                }
                Ok(char::from_u32(value).unwrap_or('\u{fffd}'))
            }
            'x' => {
                if self.peek() == Some('{') {
                    let Some(close) = self.rest().find('}') else {
                        self.pos = self.src.len();
                        return bad(self);
                    };
                    let hex = &self.rest()[1..close];
                    self.pos += close + 1;
                    match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) if !hex.is_empty() => Ok(ch),
                        _ => bad(self),
                    }
                } else {
                    let hex: String = self.rest().chars().take(2).collect();
                    if hex.len() == 2 && hex.chars().all(|h| h.is_ascii_hexdigit()) {
                        self.pos += 2;
                        Ok(char::from_u32(u32::from_str_radix(&hex, 16).unwrap_or(0))
                            .unwrap_or('\0'))
                    } else {
                        self.pos += hex
                            .chars()
                            .take_while(char::is_ascii_hexdigit)
                            .map(char::len_utf8)
                            .sum::<usize>();
                        bad(self)
                    }
                }
            }
            'a' => Ok('\u{7}'),
            'f' => Ok('\u{c}'),
            't' => Ok('\t'),
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            'v' => Ok('\u{b}'),
            c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok(c),
            _ => bad(self),
        }
    }
}

enum ClassItem {
    Char(char),
    Set(String),
}

const POSIX_CLASSES: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// A literal character outside a class, escaped for the regex crate when it is a
/// metacharacter there.
fn push_literal(out: &mut String, c: char) {
    if regex_syntax_meta(c) {
        out.push('\\');
        out.push(c);
    } else if c.is_whitespace() || c.is_control() {
        out.push_str(&format!("\\x{{{:x}}}", c as u32));
    } else {
        out.push(c);
    }
}

/// A literal character inside a class: the class metacharacters of the regex crate are
/// escaped, so that `[`, `&&`, `--` and `~~` keep Go's meaning (plain characters).
fn push_class_char(out: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '^' | '-' | '&' | '~') {
        out.push('\\');
        out.push(c);
    } else if c.is_whitespace() || c.is_control() {
        out.push_str(&format!("\\x{{{:x}}}", c as u32));
    } else {
        out.push(c);
    }
}

fn regex_syntax_meta(c: char) -> bool {
    matches!(
        c,
        '\\' | '.'
            | '+'
            | '*'
            | '?'
            | '('
            | ')'
            | '|'
            | '['
            | ']'
            | '{'
            | '}'
            | '^'
            | '$'
            | '#'
            | '&'
            | '-'
            | '~'
    )
}

/// `{n}`, `{n,}` or `{n,m}` at the start of `s`: (length, min, max).
fn parse_repeat(s: &str) -> Option<(usize, u32, Option<u32>)> {
    let b = s.as_bytes();
    let mut i = 1;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        (start < *i).then(|| s[start..*i].parse::<u32>().unwrap_or(u32::MAX))
    };
    let min = digits(&mut i)?;
    let max = if i < b.len() && b[i] == b',' {
        i += 1;
        if i < b.len() && b[i] == b'}' {
            None
        } else {
            Some(digits(&mut i)?)
        }
    } else {
        Some(min)
    };
    if i < b.len() && b[i] == b'}' {
        Some((i + 1, min, max))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_go_reports_them() {
        let cases = [
            (
                "+",
                "error parsing regexp: missing argument to repetition operator: `+`",
            ),
            ("(a", "error parsing regexp: missing closing ): `(a`"),
            ("a)", "error parsing regexp: unexpected ): `a)`"),
            ("[a", "error parsing regexp: missing closing ]: `[a`"),
            (
                "a**",
                "error parsing regexp: invalid nested repetition operator: `**`",
            ),
            (
                "\\q",
                "error parsing regexp: invalid escape sequence: `\\q`",
            ),
            (
                "a\\",
                "error parsing regexp: trailing backslash at end of expression: ``",
            ),
            (
                "[z-a]",
                "error parsing regexp: invalid character class range: `z-a`",
            ),
            (
                "a{1001}",
                "error parsing regexp: invalid repeat count: `{1001}`",
            ),
            (
                "(?=a)",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
            ),
            (
                "\\1",
                "error parsing regexp: invalid escape sequence: `\\1`",
            ),
        ];
        for (pattern, want) in cases {
            assert_eq!(compile(pattern).err().as_deref(), Some(want), "{pattern}");
        }
    }

    #[test]
    fn patterns_seen_in_real_crds() {
        let cases: &[(&str, &str, bool)] = &[
            ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-name", true),
            ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "-bad", false),
            (
                "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                "1.5Gi",
                true,
            ),
            ("^https?://", "https://x", true),
            ("^[^/]+$", "a/b", false),
            ("^\\d{4}-\\d{2}$", "2024-01", true),
            ("^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$", "a.b+c@d-e.fg", true),
            ("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", "1h30m", true),
            ("^[^\\s]+$", "a b", false),
            ("^[\\]\\-]+$", "]-]", true),
            ("^[a-zA-Z0-9_\\-\\.]+$", "a_b-c.d", true),
            ("\\bword\\b", "a word here", true),
            ("^$", "", true),
        ];
        for (pattern, text, want) in cases {
            let re = compile(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
            assert_eq!(re.is_match(text), *want, "{pattern} on {text}");
        }
    }

    #[test]
    fn ascii_perl_classes_and_literals() {
        let re = compile("^\\d+$").unwrap();
        assert!(re.is_match("123"));
        assert!(!re.is_match("١٢٣"), "Go's \\d is ASCII only");
        let re = compile("^[\\w.-]+$").unwrap();
        assert!(re.is_match("a.b-c_1"));
        assert!(!re.is_match("é"));
        assert!(compile("^[[a]+$").unwrap().is_match("[a["));
        assert!(compile("^[a&&b]+$").unwrap().is_match("a&b"));
        assert!(compile("\\Qa.b\\E").unwrap().is_match("xa.by"));
        assert!(!compile("^\\Qa.b\\E$").unwrap().is_match("axb"));
        assert!(compile("a{2").unwrap().is_match("a{2"));
        assert!(compile("^(?i)abc$").unwrap().is_match("ABC"));
        assert!(compile("^\\p{L}+$").unwrap().is_match("héllo"));
        assert!(compile("^a*?b$").unwrap().is_match("aab"));
        assert!(compile("(?P<x>a)(?<y>b)").unwrap().is_match("ab"));
        assert!(compile("^\\101$").unwrap().is_match("A"));
        assert!(compile("^[[:alpha:]]+$").unwrap().is_match("abc"));
        assert!(compile("^ a#b$").unwrap().is_match(" a#b"));
    }
}
