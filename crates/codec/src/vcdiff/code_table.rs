//! The RFC 3284 §5.6 default instruction code table, for decoding (index → instruction pair)
//! and encoding (instruction or pair → index).

/// Instruction types as numbered by RFC 3284 §5.4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InstKind {
    Noop,
    Add,
    Run,
    Copy,
}

/// One half of a code table entry. `size == 0` means the size follows in the instruction
/// section; `mode` only matters for COPY.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HalfEntry {
    pub kind: InstKind,
    pub size: u8,
    pub mode: u8,
}

pub(crate) type Entry = [HalfEntry; 2];

/// Address modes in the default cache: SELF, HERE, 4 NEAR, 3 SAME.
pub(crate) const MODE_COUNT: u8 = 9;
/// COPY sizes the single-instruction entries carry in the table (others use an explicit size).
const COPY_TABLE_SIZES: std::ops::RangeInclusive<usize> = 4..=18;
const ADD_TABLE_SIZES: std::ops::RangeInclusive<usize> = 1..=17;

const NOOP: HalfEntry = HalfEntry {
    kind: InstKind::Noop,
    size: 0,
    mode: 0,
};

const fn half(kind: InstKind, size: u8, mode: u8) -> HalfEntry {
    HalfEntry { kind, size, mode }
}

/// Built exactly as the RFC's table-generation description lays it out.
pub(crate) const DEFAULT_CODE_TABLE: [Entry; 256] = build_default_table();

const fn build_default_table() -> [Entry; 256] {
    let mut table = [[NOOP, NOOP]; 256];
    table[0] = [half(InstKind::Run, 0, 0), NOOP];
    let mut i = 1;
    // ADD sizes 0 (explicit), 1..=17.
    let mut size = 0;
    while size <= 17 {
        table[i] = [half(InstKind::Add, size, 0), NOOP];
        i += 1;
        size += 1;
    }
    // COPY sizes 0 (explicit), 4..=18, for each mode.
    let mut mode = 0;
    while mode < MODE_COUNT {
        table[i] = [half(InstKind::Copy, 0, mode), NOOP];
        i += 1;
        let mut size = 4;
        while size <= 18 {
            table[i] = [half(InstKind::Copy, size, mode), NOOP];
            i += 1;
            size += 1;
        }
        mode += 1;
    }
    // ADD 1..=4 then COPY 4..=6 for modes 0..=5; ADD 1..=4 then COPY 4 for modes 6..=8.
    let mut mode = 0;
    while mode < MODE_COUNT {
        let mut add = 1;
        while add <= 4 {
            let (mut copy, last_copy) = if mode < 6 { (4, 6) } else { (4, 4) };
            while copy <= last_copy {
                table[i] = [
                    half(InstKind::Add, add, 0),
                    half(InstKind::Copy, copy, mode),
                ];
                i += 1;
                copy += 1;
            }
            add += 1;
        }
        mode += 1;
    }
    // COPY 4 then ADD 1, every mode.
    let mut mode = 0;
    while mode < MODE_COUNT {
        table[i] = [half(InstKind::Copy, 4, mode), half(InstKind::Add, 1, 0)];
        i += 1;
        mode += 1;
    }
    assert!(i == 256);
    table
}

/// The opcode for a lone instruction and whether its size must follow explicitly.
pub(crate) fn single_opcode(kind: InstKind, size: usize, mode: u8) -> (u8, bool) {
    match kind {
        InstKind::Run => (0, true),
        InstKind::Add if ADD_TABLE_SIZES.contains(&size) => (1 + size as u8, false),
        InstKind::Add => (1, true),
        InstKind::Copy if COPY_TABLE_SIZES.contains(&size) => {
            (19 + 16 * mode + (size as u8 - 3), false)
        }
        InstKind::Copy => (19 + 16 * mode, true),
        InstKind::Noop => unreachable!("NOOP is never encoded on its own"),
    }
}

/// The opcode for ADD(`add_size`) immediately followed by COPY(`copy_size`, `mode`), if the
/// default table has one (all sizes are then implied).
pub(crate) fn add_copy_opcode(add_size: usize, copy_size: usize, mode: u8) -> Option<u8> {
    if !(1..=4).contains(&add_size) {
        return None;
    }
    let a = add_size as u8;
    match (mode, copy_size) {
        (0..=5, 4..=6) => Some(163 + 12 * mode + 3 * (a - 1) + (copy_size as u8 - 4)),
        (6..=8, 4) => Some(235 + 4 * (mode - 6) + (a - 1)),
        _ => None,
    }
}

/// The opcode for COPY(`copy_size`, `mode`) immediately followed by ADD(`add_size`), if any.
pub(crate) fn copy_add_opcode(copy_size: usize, mode: u8, add_size: usize) -> Option<u8> {
    (copy_size == 4 && add_size == 1 && mode < MODE_COUNT).then(|| 247 + mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoder_lookups_agree_with_the_table() {
        for mode in 0..MODE_COUNT {
            for size in 0..40 {
                let (op, explicit) = single_opcode(InstKind::Copy, size, mode);
                let e = DEFAULT_CODE_TABLE[op as usize];
                assert_eq!(
                    e[0],
                    half(InstKind::Copy, if explicit { 0 } else { size as u8 }, mode)
                );
                assert_eq!(e[1], NOOP);
                for add in 0..6 {
                    if let Some(op) = add_copy_opcode(add, size, mode) {
                        let e = DEFAULT_CODE_TABLE[op as usize];
                        assert_eq!(
                            e,
                            [
                                half(InstKind::Add, add as u8, 0),
                                half(InstKind::Copy, size as u8, mode)
                            ]
                        );
                    }
                    if let Some(op) = copy_add_opcode(size, mode, add) {
                        let e = DEFAULT_CODE_TABLE[op as usize];
                        assert_eq!(
                            e,
                            [
                                half(InstKind::Copy, size as u8, mode),
                                half(InstKind::Add, add as u8, 0)
                            ]
                        );
                    }
                }
            }
        }
        for size in 0..40 {
            let (op, explicit) = single_opcode(InstKind::Add, size, 0);
            assert_eq!(
                DEFAULT_CODE_TABLE[op as usize][0],
                half(InstKind::Add, if explicit { 0 } else { size as u8 }, 0)
            );
        }
        assert_eq!(DEFAULT_CODE_TABLE[0][0].kind, InstKind::Run);
    }

    #[test]
    fn spot_checks_against_rfc_index_ranges() {
        assert_eq!(DEFAULT_CODE_TABLE[18][0], half(InstKind::Add, 17, 0));
        assert_eq!(DEFAULT_CODE_TABLE[162][0], half(InstKind::Copy, 18, 8));
        assert_eq!(
            DEFAULT_CODE_TABLE[163],
            [half(InstKind::Add, 1, 0), half(InstKind::Copy, 4, 0)]
        );
        assert_eq!(
            DEFAULT_CODE_TABLE[246],
            [half(InstKind::Add, 4, 0), half(InstKind::Copy, 4, 8)]
        );
        assert_eq!(
            DEFAULT_CODE_TABLE[255],
            [half(InstKind::Copy, 4, 8), half(InstKind::Add, 1, 0)]
        );
    }
}
