//! The checkpoint manifest: the small record whose presence makes a checkpoint eligible.

use crate::{AuthKey, FormatError};
use serde::{Deserialize, Serialize};

/// Version of the manifest schema this build writes. It also reads schemas 1 (before
/// incremental checkpoints: no `base`) and 2 (before the `checksum` field).
pub const MANIFEST_FORMAT: u32 = 3;

/// The lifecycle state of a checkpoint (see ARCHITECTURE.md, "The checkpoint lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CkptState {
    /// Some ranks may still be writing; never restart-eligible and never published.
    Writing,
    /// Every rank's part is stored with checksums in its fastest tier.
    Captured,
    /// The redundancy scheme is encoded.
    Protected,
    /// Stored on the global tier.
    Durable,
}

impl std::fmt::Display for CkptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CkptState::Writing => "writing",
            CkptState::Captured => "captured",
            CkptState::Protected => "protected",
            CkptState::Durable => "durable",
        })
    }
}

/// One tier's record of a complete checkpoint. A node-local tier holds one manifest per node,
/// listing the ranks of that node; the global tier holds one listing every rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub name: String,
    pub version: i64,
    pub world_size: u32,
    /// Number of (possibly simulated) nodes the job ran on.
    pub nodes: u32,
    /// The node this manifest belongs to, on node-local tiers.
    pub node: Option<u32>,
    /// The ranks whose parts this tier holds under this manifest.
    pub ranks: Vec<u32>,
    /// Redundancy scheme the checkpoint was protected with.
    pub scheme: String,
    pub state: CkptState,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The longest time any rank spent writing its part, in nanoseconds.
    pub capture_ns: u64,
    /// For an incremental checkpoint, the version its unchanged blocks come from (which must
    /// be on the same tier); `None` for a full checkpoint.
    #[serde(default)]
    pub base: Option<i64>,
}

/// The checksum a manifest carries in its `checksum` field: xxh3-64, as 16 hex digits, of the
/// compact JSON of every other field with keys in sorted order (`serde_json::Value`'s order).
fn manifest_sum(fields: &serde_json::Map<String, serde_json::Value>) -> String {
    let compact = serde_json::to_vec(fields).expect("a JSON map serialises");
    format!("{:016x}", crate::checksum(&compact))
}

/// The compact JSON of a manifest's own fields, keys sorted: what its MAC covers.
fn compact(m: &Manifest) -> (serde_json::Map<String, serde_json::Value>, Vec<u8>) {
    let serde_json::Value::Object(fields) = serde_json::to_value(m).expect("manifest serializes")
    else {
        unreachable!("a struct serialises to an object")
    };
    let bytes = serde_json::to_vec(&fields).expect("a JSON map serialises");
    (fields, bytes)
}

impl Manifest {
    /// The manifest as stored: pretty JSON of its fields plus `checksum` (format 3 and up).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(None)
    }

    /// [`Manifest::encode`], with the `mac` field of `key` when there is one (an
    /// authenticated checkpoint, `crate::auth`); the checksum covers it too.
    pub fn encode_with(&self, key: Option<&AuthKey>) -> Vec<u8> {
        let (mut fields, bytes) = compact(self);
        if let Some(k) = key {
            fields.insert("mac".into(), k.manifest_mac(&bytes).into());
        }
        if self.format >= 3 {
            let sum = manifest_sum(&fields);
            fields.insert("checksum".into(), sum.into());
        }
        let mut v = serde_json::to_vec_pretty(&fields).expect("manifest serializes");
        v.push(b'\n');
        v
    }

    /// Parse and validate a manifest read from storage; nothing in it is trusted until this
    /// returns. From format 3 its checksum must match: a manifest damaged into other valid
    /// JSON (a rank number, a base, a state) is refused rather than believed.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, FormatError> {
        Self::decode_auth(bytes).map(|(m, _)| m)
    }

    /// [`Manifest::decode`], also giving the manifest's `mac` field (an authenticated
    /// checkpoint's), which [`Manifest::mac_ok`] checks.
    pub fn decode_auth(bytes: &[u8]) -> Result<(Manifest, Option<String>), FormatError> {
        let bad = |e: serde_json::Error| FormatError::Manifest(e.to_string());
        let mut fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(bytes).map_err(bad)?;
        let sum = fields.remove("checksum");
        let format = fields.get("format").and_then(|f| f.as_u64()).unwrap_or(0);
        match (format >= 3, sum) {
            (true, Some(serde_json::Value::String(s))) => {
                if s != manifest_sum(&fields) {
                    return Err(FormatError::Checksum("manifest".into()));
                }
            }
            (true, _) => return Err(FormatError::Manifest("no checksum field".into())),
            (false, Some(_)) => {
                return Err(FormatError::Manifest(format!(
                    "format {format} has no checksum field"
                )))
            }
            (false, None) => {}
        }
        let mac = match fields.remove("mac") {
            None => None,
            Some(serde_json::Value::String(m)) if format >= 3 => Some(m),
            Some(_) => return Err(FormatError::Manifest("mac is not a string".into())),
        };
        let m: Manifest = serde_json::from_value(serde_json::Value::Object(fields)).map_err(bad)?;
        if !(1..=MANIFEST_FORMAT).contains(&m.format) {
            return Err(FormatError::Manifest(format!(
                "manifest format {} is not supported (this build reads 1 to {MANIFEST_FORMAT})",
                m.format
            )));
        }
        check_name(&m.name)?;
        if m.version < 0 {
            return Err(FormatError::Manifest(format!(
                "negative version {}",
                m.version
            )));
        }
        if m.base.is_some_and(|b| b < 0 || b >= m.version) || (m.format == 1 && m.base.is_some()) {
            return Err(FormatError::Manifest(format!(
                "v{} cannot be based on v{}",
                m.version,
                m.base.unwrap_or(-1)
            )));
        }
        if m.world_size == 0 || m.ranks.iter().any(|r| *r >= m.world_size) {
            return Err(FormatError::Manifest(format!(
                "ranks {:?} do not fit a world of {}",
                m.ranks, m.world_size
            )));
        }
        Ok((m, mac))
    }

    /// Whether `mac` (a manifest's `mac` field) is `key`'s MAC of this manifest.
    pub fn mac_ok(&self, key: &AuthKey, mac: &str) -> bool {
        key.manifest_mac_ok(&compact(self).1, mac)
    }
}

/// The index of a node directory name `node<i>` written exactly (no sign, no leading zero),
/// so that the index names the directory and nothing else.
pub fn node_index(name: &str) -> Option<u32> {
    let i: u32 = name.strip_prefix("node")?.parse().ok()?;
    (format!("node{i}") == name).then_some(i)
}

/// True for `node<digits>`, the names of node directories under the node-local tier root.
pub fn is_node_dir(name: &str) -> bool {
    name.strip_prefix("node")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Text read from stored data (a name in a rank file's index) or given by a caller, for a
/// message: quoted, with control characters and quotes escaped, and cut after 64 characters
/// followed by its length, so that a hostile name can neither flood a message nor forge a
/// line of output.
pub fn shown(text: &str) -> String {
    const MAX: usize = 64;
    let cut: String = text.chars().take(MAX).collect();
    let mut s = format!("{cut:?}");
    if cut.len() < text.len() {
        s.push_str(&format!("... ({} bytes)", text.len()));
    }
    s
}

/// Check that a checkpoint name can be used as one path component: 1 to 128 characters from
/// `[A-Za-z0-9._-]`, not starting with a dot, and not of the form `node<digits>` (reserved for
/// node directories).
pub fn check_name(name: &str) -> Result<(), FormatError> {
    let ok = !name.is_empty()
        && !is_node_dir(name)
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(FormatError::Invalid {
            field: "checkpoint name",
            value: format!(
                "{} (use 1-128 characters from A-Z a-z 0-9 . _ -, not starting with '.')",
                shown(name)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_text_is_quoted_escaped_and_cut() {
        assert_eq!(shown("ok"), "\"ok\"");
        assert_eq!(shown("a\nb\x1b[2J"), "\"a\\nb\\u{1b}[2J\"");
        let long = "x".repeat(65535);
        let s = shown(&long);
        assert!(s.len() < 100 && s.ends_with("... (65535 bytes)"), "{s}");
        let e = check_name(&long).unwrap_err().to_string();
        assert!(e.len() < 200, "{e}");
    }

    fn sample() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            name: "heat".into(),
            version: 10,
            world_size: 4,
            nodes: 2,
            node: Some(1),
            ranks: vec![2, 3],
            scheme: "single".into(),
            state: CkptState::Captured,
            created_unix_ms: 1,
            capture_ns: 2,
            base: Some(7),
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn a_mac_is_carried_checked_and_covered_by_the_checksum() {
        let key = AuthKey::new(&[3; 32]);
        let m = sample();
        let bytes = m.encode_with(Some(&key));
        let (back, mac) = Manifest::decode_auth(&bytes).unwrap();
        let mac = mac.expect("a mac field");
        assert_eq!(back, m);
        assert!(back.mac_ok(&key, &mac));
        assert!(!back.mac_ok(&AuthKey::new(&[4; 32]), &mac));
        let mut other = m.clone();
        other.version = 11;
        assert!(!other.mac_ok(&key, &mac));
        assert_eq!(Manifest::decode_auth(&m.encode()).unwrap().1, None);
        // Changing the MAC without the checksum is damage.
        let text = String::from_utf8(bytes)
            .unwrap()
            .replace(&mac, &"0".repeat(64));
        assert!(Manifest::decode(text.as_bytes()).is_err());
    }

    #[test]
    fn hostile_names_and_ranks_are_rejected() {
        for bad in ["", "..", "../x", "/etc", "a/b", ".hidden", "a b", "node3"] {
            let mut m = sample();
            m.name = bad.into();
            assert!(Manifest::decode(&m.encode()).is_err(), "{bad:?} accepted");
        }
        let mut m = sample();
        m.ranks = vec![4];
        assert!(Manifest::decode(&m.encode()).is_err());
        assert!(Manifest::decode(b"{\"format\":1").is_err());
        let mut m = sample();
        m.base = Some(10);
        assert!(
            Manifest::decode(&m.encode()).is_err(),
            "base not older accepted"
        );
    }

    #[test]
    fn a_manifest_damaged_into_other_valid_json_fails_its_checksum() {
        let m = sample();
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains("\"checksum\": \""), "{text}");
        for (from, to) in [
            ("\"version\": 10", "\"version\": 11"),
            ("\"base\": 7", "\"base\": 6"),
            ("\"captured\"", "\"durable\""),
            ("\"nodes\": 2", "\"nodes\": 3"),
        ] {
            assert!(text.contains(from), "{from} not in {text}");
            let bad = text.replacen(from, to, 1);
            assert_eq!(
                Manifest::decode(bad.as_bytes()).unwrap_err(),
                FormatError::Checksum("manifest".into()),
                "{from} -> {to}"
            );
        }
        // Whitespace and key order are not part of it: the fields are.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            Manifest::decode(&serde_json::to_vec(&v).unwrap()).unwrap(),
            m
        );
        let no_sum: String = text
            .lines()
            .filter(|l| !l.contains("\"checksum\""))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(Manifest::decode(no_sum.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("no checksum"));
        // Format 2 (before the checksum) is still read.
        let old = Manifest {
            format: 2,
            ..sample()
        };
        assert!(!String::from_utf8(old.encode())
            .unwrap()
            .contains("checksum"));
        assert_eq!(Manifest::decode(&old.encode()).unwrap(), old);
    }

    #[test]
    fn schema_1_manifests_are_full_checkpoints() {
        let text = r#"{"format":1,"name":"heat","version":3,"world_size":2,"nodes":1,"node":null,
            "ranks":[0,1],"scheme":"single","state":"durable","created_unix_ms":5,"capture_ns":6}"#;
        let m = Manifest::decode(text.as_bytes()).unwrap();
        assert_eq!((m.format, m.base), (1, None));
    }
}
