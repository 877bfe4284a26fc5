//! RE2 patterns (ONNX's `RegexFullMatch` syntax, what ORT's CPU EP runs) on the `regex` crate.
//!
//! The two engines share most syntax and the same guarantees (no backreferences, linear-time
//! matching, UTF-8 input whose invalid bytes no `.` matches). Where they differ, the pattern is
//! rewritten to RE2's meaning before `regex` compiles it:
//!
//! - RE2's Perl classes and word boundary are ASCII: `\w` `\d` `\s` (and `\W` `\D` `\S`)
//!   become ASCII classes (`\s` is `[\t\n\f\r ]`: no `\v`), `\b` `\B` become `(?-u:\b)`
//!   `(?-u:\B)`;
//! - RE2 reads `\<` `\>` as the literal characters (`regex` as word-boundary assertions);
//! - RE2 reads a `{` that does not start a counted repetition as a literal;
//! - inside a class RE2 has no nested classes and no set operators: `[` (other than
//!   `[:alpha:]`), `&` and `~` are literals there; a `--` is refused;
//! - `\Q...\E` quotes literal text.
//!
//! What `regex` can't express (`\C`, backreferences, octal escapes) or RE2 refuses is an
//! error: the node stays on ORT's CPU EP. Parentheses are checked to balance, so the anchored
//! wrapper `\A(?:...)\z` can't change the pattern's structure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::bytes::{Regex, RegexBuilder};

/// The compiled-size bound of one pattern (a hostile `(a{1000}){1000}` is refused).
const SIZE_LIMIT: usize = 1 << 22;

/// How many compiled patterns are kept (the cache empties when it is full).
const CACHE_CAPACITY: usize = 64;

/// `pattern` (RE2 syntax, UTF-8) compiled to match whole strings.
pub(crate) fn compile(pattern: &[u8]) -> Result<Arc<Regex>, String> {
    static CACHE: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(re);
    }
    let text = std::str::from_utf8(pattern).map_err(|_| "the pattern is not valid UTF-8")?;
    let translated = translate(text)?;
    let re = RegexBuilder::new(&format!(r"\A(?:{translated})\z"))
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| format!("pattern {text:?} does not compile: {e}"))?;
    let re = Arc::new(re);
    if let Ok(mut c) = cache.lock() {
        if c.len() >= CACHE_CAPACITY {
            c.clear();
        }
        c.insert(pattern.to_vec(), re.clone());
    }
    Ok(re)
}

/// Whether all of `s` matches `re` (made by [`compile`]).
pub(crate) fn full_match(re: &Regex, s: &[u8]) -> bool {
    re.is_match(s)
}

/// RE2 syntax rewritten for `regex` (see the module docs).
pub(crate) fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                i = escape(&chars, i, &mut out, false)?;
                continue;
            }
            '[' => {
                i = class(&chars, i, &mut out)?;
                continue;
            }
            '(' => {
                depth += 1;
                out.push('(');
            }
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or("the pattern has an unmatched ')'")?;
                out.push(')');
            }
            '{' => match repetition_end(&chars, i) {
                Some(end) => {
                    out.extend(&chars[i..=end]);
                    i = end + 1;
                    continue;
                }
                None => out.push_str(r"\{"),
            },
            '}' => out.push_str(r"\}"),
            _ => out.push(c),
        }
        i += 1;
    }
    if depth != 0 {
        return Err("the pattern has an unmatched '('".into());
    }
    Ok(out)
}

/// The index of the `}` closing a counted repetition `{n}`, `{n,}` or `{n,m}` at `i`.
fn repetition_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let digits = |j: &mut usize| {
        let start = *j;
        while chars.get(*j).is_some_and(char::is_ascii_digit) {
            *j += 1;
        }
        *j > start
    };
    if !digits(&mut j) {
        return None;
    }
    if chars.get(j) == Some(&',') {
        j += 1;
        digits(&mut j);
    }
    (chars.get(j) == Some(&'}')).then_some(j)
}

/// Copies `chars[from..]` through the next `close` into `out`; the index after it.
fn copy_through(
    chars: &[char],
    from: usize,
    close: char,
    out: &mut String,
) -> Result<usize, String> {
    let end = chars[from..]
        .iter()
        .position(|&c| c == close)
        .map(|p| from + p)
        .ok_or_else(|| format!("the pattern misses a '{close}'"))?;
    out.extend(&chars[from..=end]);
    Ok(end + 1)
}

/// Rewrites the escape at `chars[i]` (a backslash); the index after it.
fn escape(chars: &[char], i: usize, out: &mut String, in_class: bool) -> Result<usize, String> {
    let Some(&e) = chars.get(i + 1) else {
        return Err("the pattern ends with a lone backslash".into());
    };
    let next = i + 2;
    match e {
        'w' => out.push_str(if in_class {
            "0-9A-Za-z_"
        } else {
            "[0-9A-Za-z_]"
        }),
        'd' => out.push_str(if in_class { "0-9" } else { "[0-9]" }),
        's' => out.push_str(if in_class {
            r"\t\n\x0C\r\x20"
        } else {
            r"[\t\n\x0C\r\x20]"
        }),
        // a negated class, nested when inside a class (which `regex` allows)
        'W' => out.push_str("[^0-9A-Za-z_]"),
        'D' => out.push_str("[^0-9]"),
        'S' => out.push_str(r"[^\t\n\x0C\r\x20]"),
        'b' | 'B' if in_class => {
            return Err(format!("\\{e} inside a character class is not supported"));
        }
        'b' => out.push_str(r"(?-u:\b)"),
        'B' => out.push_str(r"(?-u:\B)"),
        '<' | '>' => out.push(e),
        'p' | 'P' | 'x' if chars.get(next) == Some(&'{') => {
            out.push('\\');
            out.push(e);
            return copy_through(chars, next, '}', out);
        }
        'p' | 'P' => {
            let Some(&name) = chars.get(next) else {
                return Err(format!("the pattern ends inside \\{e}"));
            };
            out.extend(['\\', e, name]);
            return Ok(next + 1);
        }
        'x' => {
            let hex: Vec<char> = chars[next..].iter().take(2).copied().collect();
            if hex.len() != 2 || !hex.iter().all(char::is_ascii_hexdigit) {
                return Err("\\x needs two hex digits or braces".into());
            }
            out.extend(['\\', 'x', hex[0], hex[1]]);
            return Ok(next + 2);
        }
        'Q' if !in_class => {
            let rest: String = chars[next..].iter().collect();
            let (quoted, skip) = match rest.find(r"\E") {
                Some(p) => (&rest[..p], p + 2),
                None => (rest.as_str(), rest.len()),
            };
            out.push_str(&regex::escape(quoted));
            return Ok(next + quoted.chars().count() + (skip - quoted.len()));
        }
        'E' => {}
        'C' => return Err(r"\C (any byte) is not supported".into()),
        '0'..='9' => {
            return Err(format!(
                "\\{e}: backreferences and octal escapes are not supported"
            ));
        }
        _ => {
            out.push('\\');
            out.push(e);
        }
    }
    Ok(next)
}

/// Rewrites the class opening at `chars[i]` (a `[`); the index after its `]`.
fn class(chars: &[char], i: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    let mut j = i + 1;
    if chars.get(j) == Some(&'^') {
        out.push('^');
        j += 1;
    }
    // a `]` first in the class is a literal
    if chars.get(j) == Some(&']') {
        out.push_str(r"\]");
        j += 1;
    }
    loop {
        let Some(&c) = chars.get(j) else {
            return Err("the pattern misses a ']'".into());
        };
        match c {
            ']' => {
                out.push(']');
                return Ok(j + 1);
            }
            '\\' => {
                j = escape(chars, j, out, true)?;
                continue;
            }
            '[' if chars.get(j + 1) == Some(&':') => {
                // a POSIX class `[:alpha:]` (ASCII in both engines)
                let rest: String = chars[j..].iter().collect();
                let end = rest.find(":]").ok_or("a '[:' in a class misses its ':]'")?;
                out.push_str(&rest[..end + 2]);
                j += rest[..end + 2].chars().count();
                continue;
            }
            '[' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '-' if chars.get(j + 1) == Some(&'-') => {
                return Err("'--' in a character class is not supported".into());
            }
            _ => out.push(c),
        }
        j += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        full_match(&compile(p.as_bytes()).unwrap(), s.as_bytes())
    }

    #[test]
    fn ascii_perl_classes() {
        assert!(m(r"\w+", "abc_09"));
        assert!(!m(r"\w+", "é"));
        assert!(m(r"\W", "é"));
        assert!(!m(r"\d", "٣"));
        assert!(m(r"[\w.-]+", "a.b-c"));
        assert!(m(r"[^\W]+", "abc"));
        assert!(!m(r"\s", "\u{0B}"));
        assert!(m(r"\s", "\u{0C}"));
        assert!(m(r"www\.[\w.-]+\.\bcom\b", "www.example.com"));
        assert!(!m(r"www\.[\w.-]+\.\bcom\b", "www.example.org"));
    }

    #[test]
    fn full_match_only() {
        assert!(!m("ab", "abc"));
        assert!(m("a|ab", "ab"));
        assert!(m("", ""));
        assert!(!m("a$", "a\n"));
    }

    #[test]
    fn re2_literals() {
        assert!(m(r"a{x}", "a{x}"));
        assert!(m(r"a{2}", "aa"));
        assert!(m(r"\<a\>", "<a>"));
        assert!(m(r"[[a]+", "[a["));
        assert!(m(r"[a&&b]+", "a&b"));
        assert!(m(r"\Q.*\E+", ".**"));
        assert!(!m(r"\Q.*\E", "ab"));
        assert!(m(r"[[:alpha:]]+", "abc"));
        assert!(m(r"\x41\x{42}", "AB"));
        assert!(m(r"\pL\p{Greek}", "aα"));
    }

    #[test]
    fn refused_patterns() {
        for p in [
            r"(a",
            r"a)",
            r"a)|(b",
            r"\1",
            r"\C",
            "[a",
            r"a\",
            r"[a--b]",
            "(?P<n>a)\\k<n>",
        ] {
            assert!(compile(p.as_bytes()).is_err(), "{p} should be refused");
        }
        assert!(compile(&[0xff]).is_err());
        assert!(compile(b"(a{1000}){1000}").is_err());
    }

    #[test]
    fn invalid_utf8_input() {
        let re = compile(b".").unwrap();
        assert!(!full_match(&re, &[0xff]));
        assert!(full_match(&compile(b".*").unwrap(), "é".as_bytes()));
    }
}
