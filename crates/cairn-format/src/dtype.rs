//! Element types of protected regions, with their stable on-disk codes.

use serde::{Deserialize, Serialize};

/// The element type of a protected region. The numeric codes are part of the file format and
/// of the C ABI (`cairn_dtype`); never renumber them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Dtype {
    Byte = 0,
    Int32 = 1,
    Int64 = 2,
    Float = 3,
    Double = 4,
    Int8 = 5,
    Int16 = 6,
    Uint32 = 7,
    Uint64 = 8,
}

impl Dtype {
    pub const ALL: [Dtype; 9] = [
        Dtype::Byte,
        Dtype::Int32,
        Dtype::Int64,
        Dtype::Float,
        Dtype::Double,
        Dtype::Int8,
        Dtype::Int16,
        Dtype::Uint32,
        Dtype::Uint64,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::Byte | Dtype::Int8 => 1,
            Dtype::Int16 => 2,
            Dtype::Int32 | Dtype::Float | Dtype::Uint32 => 4,
            Dtype::Int64 | Dtype::Double | Dtype::Uint64 => 8,
        }
    }

    /// The type for an on-disk or C ABI code, if it names one.
    pub fn from_code(code: u32) -> Option<Dtype> {
        Dtype::ALL.iter().copied().find(|d| *d as u32 == code)
    }

    /// Lower-case name, as shown by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Byte => "byte",
            Dtype::Int32 => "int32",
            Dtype::Int64 => "int64",
            Dtype::Float => "float",
            Dtype::Double => "double",
            Dtype::Int8 => "int8",
            Dtype::Int16 => "int16",
            Dtype::Uint32 => "uint32",
            Dtype::Uint64 => "uint64",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_rejected() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_code(d as u32), Some(d));
        }
        assert_eq!(Dtype::from_code(9), None);
        assert_eq!(Dtype::from_code(u32::MAX), None);
    }
}
