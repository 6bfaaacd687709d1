//! A host's RTT reader for firmware under QEMU (issue 14: the transcript's RTT transport,
//! tested in CI).
//!
//! On a board, a debug probe (`probe-rs`) reads SEGGER RTT's rings through the debug port while
//! the core runs. QEMU has no debug port, but it has a gdbstub (`-gdb tcp:…`), and GDB's remote
//! serial protocol reads and writes target memory. [`read_up_channel`] does what a probe does:
//! it finds the control block `_SEGGER_RTT` (its address from the ELF's symbols, its
//! `"SEGGER RTT"` id once the firmware has set it up), finds the up channel by name, and at
//! every poll stops the core (`^C`), copies the bytes between the ring's read and write
//! offsets, advances the read offset in the target's memory (so a firmware in
//! `BlockIfFull` mode goes on), and lets the core continue (`c`). It ends when QEMU closes the
//! connection (the firmware exited through semihosting).
//!
//! The control block's layout (rtt-target 0.6, SEGGER's): a 16-byte id, `max_up_channels` and
//! `max_down_channels` (`u32`), then the up channels' descriptors, each six `u32`: name
//! pointer, buffer pointer, size, write offset, read offset, flags.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::output;

/// The control block's id, as the firmware writes it.
const RTT_ID: &[u8] = b"SEGGER RTT\0";
/// Bytes of the control block's header: the id, then two `u32` channel counts.
const HEADER_BYTES: u32 = 24;
/// Bytes of one channel descriptor: six `u32`.
const DESCRIPTOR_BYTES: u32 = 24;
/// Offsets in a descriptor.
const NAME_AT: u32 = 0;
const BUFFER_AT: u32 = 4;
const SIZE_AT: u32 = 8;
const WRITE_AT: u32 = 12;
const READ_AT: u32 = 16;
/// Channels a control block may declare before it is taken for garbage.
const MAX_CHANNELS: u32 = 16;
/// How often the reader stops the core to read the ring: a firmware in `BlockIfFull` mode
/// that flushes after every line waits at most this long for each line.
const POLL: Duration = Duration::from_millis(5);

/// The address of `symbol` in `elf` (`arm-none-eabi-nm`).
///
/// # Errors
/// If `nm` fails or the ELF has no such symbol.
pub fn symbol_address(elf: &Path, symbol: &str) -> Result<u32> {
    let mut cmd = Command::new("arm-none-eabi-nm");
    cmd.arg(elf);
    let listing = output(cmd)?;
    listing
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, _kind, name) = (f.next()?, f.next()?, f.next()?);
            (name == symbol).then(|| u32::from_str_radix(addr, 16).ok())?
        })
        .ok_or_else(|| anyhow!("{} has no symbol {symbol}", elf.display()))
}

/// A client of GDB's remote serial protocol, over QEMU's gdbstub.
struct Gdb {
    stream: TcpStream,
    /// Bytes received and not yet consumed.
    pending: Vec<u8>,
}

/// What a read from the stub gave.
enum Reply {
    Packet(Vec<u8>),
    /// The stub closed the connection: QEMU exited.
    Closed,
}

impl Gdb {
    /// Connects to the stub at `port`, retrying while QEMU starts (up to `wait`).
    fn connect(port: u16, wait: Duration) -> Result<Gdb> {
        let start = Instant::now();
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(Gdb {
                        stream,
                        pending: Vec::new(),
                    });
                }
                Err(e) if start.elapsed() < wait => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e).context(format!("connecting to QEMU's gdbstub on {port}")),
            }
        }
    }

    /// Sends `data` as one packet (`$data#checksum`); the stub's `+` is consumed by
    /// [`Gdb::reply`].
    fn send(&mut self, data: &str) -> Result<()> {
        let sum = data.bytes().fold(0u8, |s, b| s.wrapping_add(b));
        self.stream
            .write_all(format!("${data}#{sum:02x}").as_bytes())
            .context("writing to QEMU's gdbstub")
    }

    /// The next packet (acknowledged), skipping acks; [`Reply::Closed`] at end of stream.
    fn reply(&mut self) -> Result<Reply> {
        loop {
            if let Some(start) = self.pending.iter().position(|&b| b == b'$') {
                if let Some(hash) = self.pending[start..].iter().position(|&b| b == b'#') {
                    let end = start + hash + 3;
                    if self.pending.len() >= end {
                        let body = self.pending[start + 1..start + hash].to_vec();
                        self.pending.drain(..end);
                        // The ack of the last packet fails when QEMU has just exited; the next
                        // read then sees the closed stream.
                        let _ = self.stream.write_all(b"+");
                        return Ok(Reply::Packet(body));
                    }
                }
            }
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(Reply::Closed),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return Ok(Reply::Closed)
                }
                Err(e) => return Err(e).context("reading from QEMU's gdbstub"),
            }
        }
    }

    /// A packet's reply, or `None` if QEMU exited.
    fn ask(&mut self, data: &str) -> Result<Option<Vec<u8>>> {
        if self.send(data).is_err() {
            return Ok(None);
        }
        Ok(match self.reply()? {
            Reply::Packet(p) => Some(p),
            Reply::Closed => None,
        })
    }

    /// Stops the core (`^C`) and waits for its stop reply; `false` if QEMU exited.
    fn halt(&mut self) -> Result<bool> {
        if self.stream.write_all(&[0x03]).is_err() {
            return Ok(false);
        }
        Ok(matches!(self.reply()?, Reply::Packet(_)))
    }

    /// Lets the core run (`c`: no reply until it stops again); `false` if QEMU exited.
    fn resume(&mut self) -> bool {
        self.send("c").is_ok()
    }

    /// `len` bytes of target memory at `addr`, or `None` if QEMU exited.
    fn read_memory(&mut self, addr: u32, len: u32) -> Result<Option<Vec<u8>>> {
        let Some(reply) = self.ask(&format!("m{addr:x},{len:x}"))? else {
            return Ok(None);
        };
        ensure!(
            reply.first() != Some(&b'E'),
            "the gdbstub refused to read {len} bytes at {addr:#010x}: {}",
            String::from_utf8_lossy(&reply)
        );
        let text = std::str::from_utf8(&reply).context("a memory reply that is not text")?;
        ensure!(
            text.len() == 2 * len as usize,
            "asked {len} bytes at {addr:#010x}, the gdbstub answered {} hex digits",
            text.len()
        );
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).context("a memory reply not in hex"))
            .collect::<Result<Vec<u8>>>()
            .map(Some)
    }

    /// The little-endian `u32` at `addr`, or `None` if QEMU exited.
    fn read_u32(&mut self, addr: u32) -> Result<Option<u32>> {
        Ok(self
            .read_memory(addr, 4)?
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    }

    /// Writes the little-endian `value` at `addr`; `false` if QEMU exited.
    fn write_u32(&mut self, addr: u32, value: u32) -> Result<bool> {
        let hex: String = value
            .to_le_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        match self.ask(&format!("M{addr:x},4:{hex}"))? {
            None => Ok(false),
            Some(r) if r == b"OK" => Ok(true),
            Some(r) => bail!(
                "the gdbstub refused to write {addr:#010x}: {}",
                String::from_utf8_lossy(&r)
            ),
        }
    }
}

/// Where the named up channel's descriptor is, once the control block at `block` is set up:
/// `None` while the firmware has not written the id yet.
///
/// # Errors
/// A control block with an implausible channel count, or without the channel.
fn find_channel(gdb: &mut Gdb, block: u32, name: &str) -> Result<Option<u32>> {
    let Some(header) = gdb.read_memory(block, HEADER_BYTES)? else {
        return Ok(None);
    };
    if !header.starts_with(RTT_ID) {
        return Ok(None);
    }
    let ups = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
    ensure!(
        ups <= MAX_CHANNELS,
        "the RTT control block at {block:#010x} declares {ups} up channels"
    );
    for i in 0..ups {
        let desc = block + HEADER_BYTES + i * DESCRIPTOR_BYTES;
        let Some(name_ptr) = gdb.read_u32(desc + NAME_AT)? else {
            return Ok(None);
        };
        if name_ptr == 0 {
            continue;
        }
        let Some(bytes) = gdb.read_memory(name_ptr, name.len() as u32 + 1)? else {
            return Ok(None);
        };
        if bytes.get(..name.len()) == Some(name.as_bytes()) && bytes.last() == Some(&0) {
            return Ok(Some(desc));
        }
    }
    bail!("the RTT control block at {block:#010x} has no up channel named {name:?}")
}

/// Copies what the ring of the descriptor at `desc` holds to `sink` and frees it in the
/// target; `false` if QEMU exited.
fn drain(gdb: &mut Gdb, desc: u32, sink: &mut File) -> Result<bool> {
    let Some(d) = gdb.read_memory(desc, DESCRIPTOR_BYTES)? else {
        return Ok(false);
    };
    let word = |at: u32| {
        let i = at as usize;
        u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]])
    };
    let (buffer, size, write, read) = (
        word(BUFFER_AT),
        word(SIZE_AT),
        word(WRITE_AT),
        word(READ_AT),
    );
    ensure!(
        size > 0 && write < size && read < size,
        "an RTT ring with size {size}, write offset {write}, read offset {read}"
    );
    if write == read {
        return Ok(true);
    }
    // The bytes from `read` up to `write`, wrapping at the ring's end.
    let spans = if write > read {
        vec![(read, write - read)]
    } else {
        vec![(read, size - read), (0, write)]
    };
    for (at, len) in spans.into_iter().filter(|s| s.1 > 0) {
        let Some(bytes) = gdb.read_memory(buffer + at, len)? else {
            return Ok(false);
        };
        sink.write_all(&bytes)?;
    }
    sink.flush()?;
    gdb.write_u32(desc + READ_AT, write)
}

/// Reads the up channel `channel` of the firmware `elf` running under QEMU with
/// `-gdb tcp:127.0.0.1:{port} -S` into `sink` as it streams, until QEMU exits; answers the
/// bytes read.
///
/// # Errors
/// If the stub cannot be reached within `start_wait`, the ELF has no `_SEGGER_RTT`, the
/// control block or a ring is implausible, or the sink cannot be written.
pub fn read_up_channel(
    elf: &Path,
    port: u16,
    channel: &str,
    start_wait: Duration,
    sink: &Path,
) -> Result<u64> {
    let block = symbol_address(elf, "_SEGGER_RTT")?;
    let mut file = File::create(sink).with_context(|| format!("creating {}", sink.display()))?;
    let mut gdb = Gdb::connect(port, start_wait)?;
    // QEMU was started with -S: the core waits for the first `c`.
    let mut desc = None;
    loop {
        if !gdb.resume() {
            break;
        }
        std::thread::sleep(POLL);
        if !gdb.halt()? {
            break;
        }
        if desc.is_none() {
            desc = find_channel(&mut gdb, block, channel)?;
        }
        if let Some(d) = desc {
            if !drain(&mut gdb, d, &mut file)? {
                break;
            }
        }
    }
    Ok(file.metadata()?.len())
}
