//! Instance authentication. Every instance has a 32-byte secret kept in a 0600 token file of
//! the owning user. On connect the server sends a random challenge; the client answers with a
//! keyed BLAKE3 hash of it. The secret itself never crosses the network, and a recorded answer
//! is useless for the next connection, which gets a new challenge.

pub const SECRET_LEN: usize = 32;
pub const CHALLENGE_LEN: usize = 32;

pub type Secret = [u8; SECRET_LEN];
pub type Challenge = [u8; CHALLENGE_LEN];

/// Domain separation, so the same secret hashed for another purpose can never answer a challenge.
const CONTEXT: &[u8] = b"surge-auth-v1";

pub fn answer(secret: &Secret, challenge: &Challenge) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_keyed(secret);
    hasher.update(CONTEXT);
    hasher.update(challenge);
    *hasher.finalize().as_bytes()
}

/// Constant-time check of a client's answer (BLAKE3's `Hash` equality is constant-time).
pub fn verify(secret: &Secret, challenge: &Challenge, proof: &[u8; 32]) -> bool {
    let mut hasher = blake3::Hasher::new_keyed(secret);
    hasher.update(CONTEXT);
    hasher.update(challenge);
    hasher.finalize() == blake3::Hash::from(*proof)
}

/// Parses a token file's contents: 64 hex digits, surrounding whitespace ignored.
pub fn parse_secret(text: &str) -> Option<Secret> {
    let text = text.trim();
    if text.len() != SECRET_LEN * 2 {
        return None;
    }
    let mut secret = [0u8; SECRET_LEN];
    for (i, byte) in secret.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(secret)
}

pub fn format_secret(secret: &Secret) -> String {
    secret.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_passes_wrong_fails() {
        let secret = [7u8; 32];
        let challenge = [9u8; 32];
        let proof = answer(&secret, &challenge);
        assert!(verify(&secret, &challenge, &proof));
        assert!(!verify(&[8u8; 32], &challenge, &proof));
        assert!(!verify(&secret, &[1u8; 32], &proof));
    }

    #[test]
    fn secret_text_round_trips() {
        let secret: Secret = core::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(parse_secret(&format!(" {}\n", format_secret(&secret))), Some(secret));
        assert_eq!(parse_secret("abc"), None);
        assert_eq!(parse_secret(&"zz".repeat(32)), None);
    }
}
