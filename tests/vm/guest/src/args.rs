//! Minimal `--flag value` parsing. The guest binary runs in a bare initramfs and is rebuilt
//! on every VM run, so it avoids clap; the grammar is small enough to parse by hand.

use std::collections::{HashMap, HashSet};

/// Options seen on a command line: those taking a value and boolean switches.
#[derive(Debug, Default)]
pub struct Parsed {
    values: HashMap<String, String>,
    switches: HashSet<String>,
}

/// Parses `args` (without the program and subcommand names). `with_value` lists the options
/// that take a value (`--x V` or `--x=V`), `switches` those that take none. Anything else,
/// a repeated option, or a missing value is an error, so typos do not silently change a test.
pub fn parse(args: &[String], with_value: &[&str], switches: &[&str]) -> Result<Parsed, String> {
    let mut p = Parsed::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(body) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument '{arg}'"));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if with_value.contains(&name) {
            let v = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("--{name} needs a value"))?,
            };
            if p.values.insert(name.to_string(), v).is_some() {
                return Err(format!("--{name} given twice"));
            }
        } else if switches.contains(&name) {
            if inline.is_some() {
                return Err(format!("--{name} takes no value"));
            }
            p.switches.insert(name.to_string());
        } else {
            return Err(format!("unknown option '--{name}'"));
        }
    }
    Ok(p)
}

impl Parsed {
    pub fn str(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    pub fn switch(&self, name: &str) -> bool {
        self.switches.contains(name)
    }

    /// An optional unsigned number.
    pub fn u64(&self, name: &str) -> Result<Option<u64>, String> {
        self.str(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("--{name}: '{v}' is not a number"))
            })
            .transpose()
    }

    /// A required unsigned number.
    pub fn req_u64(&self, name: &str) -> Result<u64, String> {
        self.u64(name)?
            .ok_or_else(|| format!("--{name} is required"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn values_and_switches() {
        let p = parse(
            &v(&["--threads", "2", "--seconds=5", "--cfs"]),
            &["threads", "seconds"],
            &["cfs"],
        )
        .unwrap();
        assert_eq!(p.req_u64("threads").unwrap(), 2);
        assert_eq!(p.req_u64("seconds").unwrap(), 5);
        assert!(p.switch("cfs"));
        assert!(p.req_u64("pin").is_err());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse(&v(&["--threads"]), &["threads"], &[]).is_err());
        assert!(parse(&v(&["--nope"]), &["threads"], &[]).is_err());
        assert!(parse(&v(&["stray"]), &["threads"], &[]).is_err());
        assert!(parse(&v(&["--t", "1", "--t", "2"]), &["t"], &[]).is_err());
        assert!(parse(&v(&["--cfs=1"]), &[], &["cfs"]).is_err());
        let p = parse(&v(&["--threads", "x"]), &["threads"], &[]).unwrap();
        assert!(p.req_u64("threads").is_err());
    }
}
