//! Turns one window's ADD / RUN / COPY instructions into the three RFC 3284 sections, coding
//! adjacent instructions as one default-table opcode whenever the table has the pair.

use super::address_cache::AddressCache;
use super::code_table::{add_copy_opcode, copy_add_opcode, single_opcode, InstKind};
use super::format::write_window;
use super::varint::write_varint;

#[derive(Clone, Copy)]
struct Instruction {
    kind: InstKind,
    size: usize,
    mode: u8,
}

pub(crate) struct InstructionWriter {
    data: Vec<u8>,
    instructions: Vec<u8>,
    addresses: Vec<u8>,
    cache: AddressCache,
    /// The last instruction, held back in case the next one pairs with it. Data bytes and
    /// addresses are written at once: pairing keeps instruction order, so theirs is unchanged.
    held: Option<Instruction>,
}

impl InstructionWriter {
    pub(crate) fn new() -> Self {
        Self {
            data: Vec::new(),
            instructions: Vec::new(),
            addresses: Vec::new(),
            cache: AddressCache::new(),
            held: None,
        }
    }

    pub(crate) fn add(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        self.push(Instruction {
            kind: InstKind::Add,
            size: bytes.len(),
            mode: 0,
        });
    }

    pub(crate) fn run(&mut self, byte: u8, size: usize) {
        self.data.push(byte);
        self.push(Instruction {
            kind: InstKind::Run,
            size,
            mode: 0,
        });
    }

    /// COPY `size` bytes from superstring `address` while the window position is `here`.
    pub(crate) fn copy(&mut self, address: usize, here: usize, size: usize) {
        let encoded = self
            .cache
            .encode(address as u64, here as u64, &mut self.addresses);
        self.push(Instruction {
            kind: InstKind::Copy,
            size,
            mode: encoded.mode,
        });
    }

    /// Address-section bytes a COPY from `address` would cost right now.
    pub(crate) fn address_cost(&self, address: usize, here: usize) -> usize {
        self.cache.best_encoding(address as u64, here as u64).cost()
    }

    /// Writes the finished window to `out` and starts a fresh one.
    pub(crate) fn finish_window(
        &mut self,
        out: &mut Vec<u8>,
        source_segment: Option<(u64, u64)>,
        target_len: usize,
        adler32: Option<u32>,
    ) {
        if let Some(held) = self.held.take() {
            self.write_single(held);
        }
        write_window(
            out,
            source_segment,
            target_len,
            adler32,
            [&self.data, &self.instructions, &self.addresses],
        );
        self.data.clear();
        self.instructions.clear();
        self.addresses.clear();
        self.cache.reset();
    }

    fn push(&mut self, next: Instruction) {
        if let Some(held) = self.held.take() {
            let pair = match (held.kind, next.kind) {
                (InstKind::Add, InstKind::Copy) => add_copy_opcode(held.size, next.size, next.mode),
                (InstKind::Copy, InstKind::Add) => copy_add_opcode(held.size, held.mode, next.size),
                _ => None,
            };
            if let Some(opcode) = pair {
                self.instructions.push(opcode);
                return;
            }
            self.write_single(held);
        }
        self.held = Some(next);
    }

    fn write_single(&mut self, inst: Instruction) {
        let (opcode, explicit_size) = single_opcode(inst.kind, inst.size, inst.mode);
        self.instructions.push(opcode);
        if explicit_size {
            write_varint(&mut self.instructions, inst.size as u64);
        }
    }
}
