//! Z85, the ZeroMQ Base-85 encoding (ZeroMQ RFC 32), used to armour CURVE
//! keys as text.
//!
//! Every 4 bytes, read as a big-endian 32-bit number, become 5 characters
//! from an 85-character alphabet, most significant digit first. The binary
//! length must be a multiple of 4 and the text length a multiple of 5.
//!
//! Kept by hand rather than taken from the `z85` crate (3.0.7, one maintainer, last
//! releases 3.0.6 in February 2025 and 3.0.7 after it, MIT/Apache-2.0, used by
//! delta_kernel, deltalake-core and uucore): since 3.0 that crate adds its own padding and
//! says it is not fully compatible with RFC 32. Its `encode` takes any length (3 bytes
//! become `#09c6`, which libzmq cannot read) and its `decode` reads a group starting with
//! `#` as padding (`#0000` is 3 zero bytes) where RFC 32 and libzmq refuse it (84 · 85⁴
//! does not fit 32 bits), and it counts error positions in bytes. A certificate reader
//! must refuse what Flux refuses and name where, so wrapping the crate would need as many
//! checks as the 60 lines of codec below.

/// The 85 characters of the Z85 alphabet, in digit order.
pub const ALPHABET: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Marks a byte that is not in [`ALPHABET`] in the decoding table.
const NOT_Z85: u8 = 0xff;

/// Digit value of every byte, or [`NOT_Z85`].
const DECODE: [u8; 256] = {
    let mut table = [NOT_Z85; 256];
    let mut digit = 0;
    while digit < ALPHABET.len() {
        table[ALPHABET[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

/// Why a Z85 encoding or decoding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Z85Error {
    /// The binary input to [`encode`] is not a whole number of 4-byte
    /// groups.
    #[error("{len} bytes cannot be Z85-encoded: the length must be a multiple of 4")]
    BinaryLength {
        /// Length of the input, in bytes.
        len: usize,
    },
    /// The text input to [`decode`] is not a whole number of
    /// 5-character groups.
    #[error("{len} characters are not valid Z85: the length must be a multiple of 5")]
    TextLength {
        /// Length of the input, in characters.
        len: usize,
    },
    /// The text contains a character outside the Z85 alphabet.
    #[error("character {ch:?} at position {pos} is not a Z85 character")]
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its position, counted in characters from 0.
        pos: usize,
    },
    /// A 5-character group encodes a number that does not fit in
    /// 32 bits.
    #[error("characters {pos} to {} encode a number larger than 32 bits", pos + 4)]
    Overflow {
        /// Position of the group's first character, counted from 0.
        pos: usize,
    },
}

/// Encodes `data` as Z85 text.
///
/// # Errors
///
/// [`Z85Error::BinaryLength`] when `data.len()` is not a multiple of 4.
pub fn encode(data: &[u8]) -> Result<String, Z85Error> {
    if !data.len().is_multiple_of(4) {
        return Err(Z85Error::BinaryLength { len: data.len() });
    }
    Ok(encode_groups(data))
}

/// Encodes every whole 4-byte group of `data`; callers make sure there
/// is no partial group.
pub(super) fn encode_groups(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len() / 4 * 5);
    for group in data.chunks_exact(4) {
        let mut value = u32::from_be_bytes([group[0], group[1], group[2], group[3]]);
        let mut digits = [0u8; 5];
        for slot in digits.iter_mut().rev() {
            *slot = ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        out.extend(digits.iter().map(|&b| char::from(b)));
    }
    out
}

/// Decodes Z85 `text` into bytes.
///
/// # Errors
///
/// [`Z85Error::InvalidChar`] for a character outside the alphabet,
/// [`Z85Error::TextLength`] when the length is not a multiple of 5 and
/// [`Z85Error::Overflow`] for a group above `u32::MAX`.
pub fn decode(text: &str) -> Result<Vec<u8>, Z85Error> {
    let mut digits = Vec::with_capacity(text.len());
    for (pos, ch) in text.chars().enumerate() {
        let digit = u8::try_from(ch)
            .ok()
            .map(|b| DECODE[usize::from(b)])
            .filter(|&d| d != NOT_Z85)
            .ok_or(Z85Error::InvalidChar { ch, pos })?;
        digits.push(digit);
    }
    if !digits.len().is_multiple_of(5) {
        return Err(Z85Error::TextLength { len: digits.len() });
    }
    let mut out = Vec::with_capacity(digits.len() / 5 * 4);
    for (index, group) in digits.chunks_exact(5).enumerate() {
        let value = group
            .iter()
            .fold(0u64, |acc, &digit| acc * 85 + u64::from(digit));
        let value = u32::try_from(value).map_err(|_| Z85Error::Overflow { pos: index * 5 })?;
        out.extend_from_slice(&value.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("test hex"))
            .collect()
    }

    #[test]
    fn z85_spec_vector() {
        let bytes = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(encode(&bytes).unwrap(), "HelloWorld");
        assert_eq!(decode("HelloWorld").unwrap(), bytes);
    }

    #[test]
    fn z85_32_byte_vector() {
        // The 32-byte key of the Z85 reference test, checked with pyzmq.
        let bytes = hex("8e0bdd697628b91d8f245587ee95c5b04d48963f79259877b49cd9063aead3b7");
        let text = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
        assert_eq!(encode(&bytes).unwrap(), text);
        assert_eq!(decode(text).unwrap(), bytes);
    }

    #[test]
    fn z85_extremes() {
        assert_eq!(encode(&[0; 4]).unwrap(), "00000");
        assert_eq!(encode(&[0xff; 4]).unwrap(), "%nSc0");
        assert_eq!(decode("%nSc0").unwrap(), [0xff; 4]);
        assert_eq!(encode(&[]).unwrap(), "");
        assert_eq!(decode("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn z85_rejects_bad_input() {
        assert_eq!(encode(&[1, 2, 3]), Err(Z85Error::BinaryLength { len: 3 }));
        assert_eq!(decode("Hello1"), Err(Z85Error::TextLength { len: 6 }));
        assert_eq!(
            decode("Hel\"o"),
            Err(Z85Error::InvalidChar { ch: '"', pos: 3 })
        );
        assert_eq!(
            decode("Helé0"),
            Err(Z85Error::InvalidChar { ch: 'é', pos: 3 })
        );
        assert_eq!(decode("00000%nSc1"), Err(Z85Error::Overflow { pos: 5 }));
        assert_eq!(decode("#####"), Err(Z85Error::Overflow { pos: 0 }));
    }

    #[test]
    fn z85_alphabet_is_85_distinct_characters() {
        let mut seen = std::collections::HashSet::new();
        assert!(ALPHABET.iter().all(|b| seen.insert(*b)));
        assert_eq!(seen.len(), 85);
    }

    proptest! {
        #[test]
        fn z85_round_trips(words in proptest::collection::vec(any::<[u8; 4]>(), 0..32)) {
            let bytes: Vec<u8> = words.concat();
            let text = encode(&bytes).unwrap();
            prop_assert_eq!(text.len(), bytes.len() / 4 * 5);
            prop_assert_eq!(decode(&text).unwrap(), bytes);
        }

        #[test]
        fn z85_decode_never_panics(text in ".{0,60}") {
            if let Ok(bytes) = decode(&text) {
                prop_assert_eq!(encode(&bytes).unwrap(), text);
            }
        }

    }
}
