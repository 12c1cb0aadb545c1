//! robots.txt: the group for our user agent (or `*`), Allow and Disallow rules with `*` and
//! `$`, the longest match winning and Allow winning a tie.

/// The rules that apply to one user agent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Robots {
    rules: Vec<(bool, String)>,
}

/// Lines read from a robots.txt at most; the rest is ignored.
const MAX_LINES: usize = 10_000;

impl Robots {
    /// Everything allowed (no robots.txt, or one that could not be read for a 4xx).
    pub fn allow_all() -> Robots {
        Robots::default()
    }

    /// Everything refused (a robots.txt that answered 5xx).
    pub fn disallow_all() -> Robots {
        Robots {
            rules: vec![(false, "/".into())],
        }
    }

    /// The rules of `text` for `agent` (its product token, e.g. "fathom").
    pub fn parse(text: &str, agent: &str) -> Robots {
        let agent = agent.to_ascii_lowercase();
        let (mut mine, mut star) = (Vec::new(), Vec::new());
        let (mut names, mut in_rules) = (Vec::<String>::new(), false);
        let mut found_mine = false;
        for line in text.lines().take(MAX_LINES) {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
            match key.as_str() {
                "user-agent" => {
                    if in_rules {
                        names.clear();
                        in_rules = false;
                    }
                    names.push(value.to_ascii_lowercase());
                }
                "allow" | "disallow" => {
                    in_rules = true;
                    if value.is_empty() {
                        continue; // "Disallow:" allows everything
                    }
                    let rule = (key == "allow", value.to_string());
                    if names.iter().any(|n| agent.contains(n.as_str()) && n != "*") {
                        found_mine = true;
                        mine.push(rule.clone());
                    }
                    if names.iter().any(|n| n == "*") {
                        star.push(rule);
                    }
                }
                _ => {}
            }
        }
        Robots {
            rules: if found_mine { mine } else { star },
        }
    }

    /// Whether `path` (with its query) may be fetched.
    pub fn allows(&self, path: &str) -> bool {
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if matches(pattern, path) {
                let len = pattern.len();
                best = match best {
                    Some((l, a)) if l > len || (l == len && a) => Some((l, a)),
                    _ => Some((len, *allow)),
                };
            }
        }
        best.is_none_or(|(_, allow)| allow)
    }
}

/// Robots pattern matching: a prefix match where `*` matches any run and a final `$` anchors
/// the end. Greedy with backtracking to the last `*`: at most pattern x path steps.
fn matches(pattern: &str, path: &str) -> bool {
    let (p, anchored) = match pattern.strip_suffix('$') {
        Some(p) => (p.as_bytes(), true),
        None => (pattern.as_bytes(), false),
    };
    let s = path.as_bytes();
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    loop {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if pi == p.len() && (!anchored || si == s.len()) {
            return true;
        } else if pi < p.len() && si < s.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some(st) = star.filter(|_| mark < s.len()) {
            mark += 1;
            si = mark;
            pi = st + 1;
        } else {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_precedence_and_wildcards() {
        let text = "User-agent: *\nDisallow: /private\nAllow: /private/open\n\n\
                    User-agent: OtherBot\nDisallow: /\n\n\
                    User-agent: *\nDisallow: /*.pdf$\n";
        let r = Robots::parse(text, "fathom/0.1");
        assert!(r.allows("/"));
        assert!(!r.allows("/private/x"));
        assert!(r.allows("/private/open/x"));
        assert!(!r.allows("/docs/a.pdf"));
        assert!(r.allows("/docs/a.pdf?x=1"));
        let mine = Robots::parse(
            "User-agent: fathom\nDisallow: /no\nUser-agent: *\nDisallow: /",
            "fathom/0.1",
        );
        assert!(mine.allows("/yes") && !mine.allows("/no/x"));
        assert!(Robots::parse("User-agent: *\nDisallow:\n", "fathom").allows("/a"));
        assert!(!Robots::disallow_all().allows("/a"));
    }
}
