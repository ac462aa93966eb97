//! Authenticated checkpoints (`[security] authenticate`, `docs/format.md`): what a keyed
//! checkpoint's bytes are, given the user's key.
//!
//! Three values come from the key, each through a subkey of its own (BLAKE3's key
//! derivation, so one cannot stand in for another):
//!
//! - the **content hash** of every block (the `hash` of its block record): BLAKE3 keyed
//!   with the block subkey, its first 16 bytes, in place of XXH3-128. Restart checks every
//!   block it restores against it, so a block cannot be replaced without the key even by
//!   someone who can find XXH3 collisions;
//! - the **index MAC**: keyed BLAKE3 of the index (its block records included), stored in
//!   an authentication record at the index's end ([`AUTH_MAGIC`], then the 32-byte MAC);
//! - the **manifest MAC**: keyed BLAKE3 of the manifest's compact JSON, its `mac` field.
//!
//! Checksums stay what they are without a key: they find damage, these find forgery.

/// The first eight bytes of a rank file index's authentication record.
pub const AUTH_MAGIC: &[u8; 8] = b"CAIRNMAC";
/// Length of the authentication record: magic and MAC.
pub const AUTH_LEN: usize = 8 + 32;

/// The subkeys of one user key.
#[derive(Clone)]
pub struct AuthKey {
    block: [u8; 32],
    index: [u8; 32],
    manifest: [u8; 32],
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

impl AuthKey {
    /// The subkeys of the user key `key` (32 random bytes).
    pub fn new(key: &[u8; 32]) -> AuthKey {
        AuthKey {
            block: blake3::derive_key("cairn 2026-11 block content hash", key),
            index: blake3::derive_key("cairn 2026-11 rank file index MAC", key),
            manifest: blake3::derive_key("cairn 2026-11 manifest MAC", key),
        }
    }

    /// The content hash of a block's raw bytes.
    pub fn block_hash(&self, raw: &[u8]) -> u128 {
        let h = blake3::keyed_hash(&self.block, raw);
        u128::from_le_bytes(h.as_bytes()[..16].try_into().expect("16 bytes"))
    }

    /// The MAC of an index's bytes up to and including [`AUTH_MAGIC`].
    pub fn index_mac(&self, covered: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.index, covered).as_bytes()
    }

    /// Whether `index` (an index with its authentication record at the end) carries this
    /// key's MAC. The comparison takes the same time wherever the bytes differ.
    pub fn index_mac_ok(&self, index: &[u8]) -> bool {
        let Some(at) = index.len().checked_sub(AUTH_LEN) else {
            return false;
        };
        if &index[at..at + 8] != AUTH_MAGIC {
            return false;
        }
        let mac: [u8; 32] = index[at + 8..].try_into().expect("32 bytes");
        blake3::keyed_hash(&self.index, &index[..at + 8]) == blake3::Hash::from_bytes(mac)
    }

    /// The MAC of a manifest's compact JSON, as 64 hex digits.
    pub fn manifest_mac(&self, compact: &[u8]) -> String {
        blake3::keyed_hash(&self.manifest, compact)
            .to_hex()
            .to_string()
    }

    /// Whether `mac` (64 hex digits) is this key's MAC of `compact`, compared in constant
    /// time.
    pub fn manifest_mac_ok(&self, compact: &[u8], mac: &str) -> bool {
        match blake3::Hash::from_hex(mac) {
            Ok(m) => blake3::keyed_hash(&self.manifest, compact) == m,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_key_gives_other_hashes_and_macs() {
        let (a, b) = (AuthKey::new(&[1; 32]), AuthKey::new(&[2; 32]));
        assert_ne!(a.block_hash(b"x"), b.block_hash(b"x"));
        assert_eq!(a.block_hash(b"x"), a.block_hash(b"x"));
        let mut ix = b"index bytes".to_vec();
        ix.extend_from_slice(AUTH_MAGIC);
        let mac = a.index_mac(&ix);
        ix.extend_from_slice(&mac);
        assert!(a.index_mac_ok(&ix));
        assert!(!b.index_mac_ok(&ix));
        ix[0] ^= 1;
        assert!(!a.index_mac_ok(&ix));
        let m = a.manifest_mac(b"{}");
        assert!(a.manifest_mac_ok(b"{}", &m) && !b.manifest_mac_ok(b"{}", &m));
        assert!(!a.manifest_mac_ok(b"{}", "zz"));
    }
}
