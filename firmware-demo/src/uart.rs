//! The transcript's link: each board's UART as an [`embedded_io::Write`], written straight to
//! its data register (no HAL: a few registers each, and the QEMU machines have no HAL crate).
//! The only `unsafe` outside [`crate::rt`]: volatile accesses to the peripheral's registers,
//! at the addresses the board's reference manual gives (cited per driver).
#![allow(unsafe_code)]

/// Polls of a busy transmitter before a write gives up ([`UartError::Stuck`]): far more than
/// one byte takes at 115200 baud on any of the boards (about 87 µs).
const SPIN_LIMIT: u32 = 1_000_000;

/// Waits until `ready` answers true, at most [`SPIN_LIMIT`] polls; answers whether it did.
fn wait(ready: impl Fn() -> bool) -> bool {
    (0..SPIN_LIMIT).any(|_| ready())
}

/// A 32-bit memory-mapped register at `base + offset`.
#[derive(Clone, Copy)]
struct Reg(usize);

impl Reg {
    fn read(self) -> u32 {
        // SAFETY: every `Reg` is a register of the board's UART (or its clock and pin setup)
        // from the board's reference manual; reading it has no effect but the register's own.
        unsafe { core::ptr::read_volatile(self.0 as *const u32) }
    }

    fn write(self, value: u32) {
        // SAFETY: as in `read`; nothing else in the firmware maps these registers.
        unsafe { core::ptr::write_volatile(self.0 as *mut u32, value) }
    }
}

/// The UART the board's feature selects.
pub struct Uart(());

/// The transmitter stayed busy for [`SPIN_LIMIT`] polls (a UART without a clock, a stuck
/// line): the write gives up instead of hanging.
#[derive(Debug)]
pub enum UartError {
    /// The transmitter never became ready.
    Stuck,
}

impl core::fmt::Display for UartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the UART's transmitter stayed busy")
    }
}

impl core::error::Error for UartError {}

impl embedded_io::Error for UartError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::TimedOut
    }
}

impl embedded_io::ErrorType for Uart {
    type Error = UartError;
}

impl embedded_io::Write for Uart {
    fn write(&mut self, buf: &[u8]) -> Result<usize, UartError> {
        for &b in buf {
            if !imp::put(b) {
                return Err(UartError::Stuck);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), UartError> {
        if imp::flush() {
            Ok(())
        } else {
            Err(UartError::Stuck)
        }
    }
}

impl Uart {
    /// Sets up the board's UART for transmission (clock, pins, baud rate, enable) and answers
    /// it. Call once.
    pub fn take() -> Uart {
        imp::init();
        Uart(())
    }
}

/// Arm CMSDK APB UART (mps2-an386's UART0 at 0x4000_4000; Arm DDI0479C, section 4.3): DATA at
/// 0x00, STATE at 0x04 (bit 0: TX buffer full), CTRL at 0x08 (bit 0: TX enable), BAUDDIV at
/// 0x10 (at least 16).
#[cfg(feature = "qemu-mps2-an386")]
mod imp {
    use super::Reg;
    const BASE: usize = 0x4000_4000;
    const DATA: Reg = Reg(BASE);
    const STATE: Reg = Reg(BASE + 0x04);
    const CTRL: Reg = Reg(BASE + 0x08);
    const BAUDDIV: Reg = Reg(BASE + 0x10);

    pub fn init() {
        // 25 MHz / 115200 baud.
        BAUDDIV.write(217);
        CTRL.write(1);
    }

    pub fn put(b: u8) -> bool {
        let ready = super::wait(|| STATE.read() & 1 == 0);
        DATA.write(u32::from(b));
        ready
    }

    pub fn flush() -> bool {
        super::wait(|| STATE.read() & 1 == 0)
    }
}

/// Arm PrimeCell PL011 (Arm DDI0183G, section 3.2): DR at 0x00, FR at 0x18 (bit 5: TX FIFO
/// full, bit 3: busy), IBRD 0x24, FBRD 0x28, LCR_H 0x2C, CR 0x30 (bit 0: UART enable, bit 8:
/// TX enable). lm3s6965evb's UART0 at 0x4000_C000 (TI LM3S6965 data sheet, table 2-4) and the
/// RP2040's UART0 at 0x4003_4000 (RP2040 datasheet, section 4.2).
#[cfg(any(feature = "qemu-lm3s6965evb", feature = "rp2040"))]
mod imp {
    use super::Reg;
    #[cfg(feature = "qemu-lm3s6965evb")]
    const BASE: usize = 0x4000_C000;
    #[cfg(feature = "rp2040")]
    const BASE: usize = 0x4003_4000;
    const DR: Reg = Reg(BASE);
    const FR: Reg = Reg(BASE + 0x18);
    const IBRD: Reg = Reg(BASE + 0x24);
    const FBRD: Reg = Reg(BASE + 0x28);
    const LCR_H: Reg = Reg(BASE + 0x2C);
    const CR: Reg = Reg(BASE + 0x30);

    pub fn init() {
        #[cfg(feature = "rp2040")]
        rp2040_setup();
        // 115200 baud from UARTCLK: the divisor UARTCLK / (16 · 115200) as 16.6 fixed point.
        // lm3s6965evb: 12 MHz (6.51: 6 + 33/64); RP2040: clk_peri on clk_sys from the ring
        // oscillator at reset, about 6.5 MHz (3.53: 3 + 34/64) and imprecise: a real
        // firmware starts the crystal and PLLs first (its HAL's clock setup).
        #[cfg(feature = "qemu-lm3s6965evb")]
        let (ibrd, fbrd) = (6, 33);
        #[cfg(feature = "rp2040")]
        let (ibrd, fbrd) = (3, 34);
        IBRD.write(ibrd);
        FBRD.write(fbrd);
        // 8 data bits, FIFOs on.
        LCR_H.write((0b11 << 5) | (1 << 4));
        CR.write((1 << 8) | 1);
    }

    /// RP2040: take UART0, IO_BANK0 and PADS_BANK0 out of reset, run clk_peri from clk_sys,
    /// and give GPIO0 to UART0 TX (RP2040 datasheet: RESETS 2.14, CLOCKS 2.15, IO_BANK0 2.19).
    #[cfg(feature = "rp2040")]
    fn rp2040_setup() {
        const RESETS: usize = 0x4000_C000;
        const RESET: Reg = Reg(RESETS);
        const RESET_DONE: Reg = Reg(RESETS + 0x8);
        const CLK_PERI_CTRL: Reg = Reg(0x4000_8000 + 0x48);
        const GPIO0_CTRL: Reg = Reg(0x4001_4000 + 0x04);
        const UNRESET: u32 = (1 << 22) | (1 << 8) | (1 << 5);
        CLK_PERI_CTRL.write(1 << 11);
        RESET.write(RESET.read() & !UNRESET);
        while RESET_DONE.read() & UNRESET != UNRESET {}
        GPIO0_CTRL.write(2);
    }

    pub fn put(b: u8) -> bool {
        let ready = super::wait(|| FR.read() & (1 << 5) == 0);
        DR.write(u32::from(b));
        ready
    }

    pub fn flush() -> bool {
        super::wait(|| FR.read() & (1 << 3) == 0)
    }
}

/// Nordic UART (not UARTE): the nRF51's UART0 at 0x4000_2000 (nRF51 Series Reference Manual
/// v3.0, section 29) and the nRF52840's UART0 at the same address with the same registers
/// (nRF52840 Product Specification v1.7, section 6.33): TASKS_STARTTX 0x008, EVENTS_TXDRDY
/// 0x11C, ENABLE 0x500 (4: enabled), PSELTXD 0x50C, TXD 0x51C, BAUDRATE 0x524.
#[cfg(any(feature = "qemu-microbit", feature = "nrf52840-dk"))]
mod imp {
    use super::Reg;
    const BASE: usize = 0x4000_2000;
    const STARTTX: Reg = Reg(BASE + 0x008);
    const TXDRDY: Reg = Reg(BASE + 0x11C);
    const ENABLE: Reg = Reg(BASE + 0x500);
    const PSELTXD: Reg = Reg(BASE + 0x50C);
    const TXD: Reg = Reg(BASE + 0x51C);
    const BAUDRATE: Reg = Reg(BASE + 0x524);
    /// The TX pin: the micro:bit's USB serial (P0.24), the nRF52840-DK's (P0.06).
    #[cfg(feature = "qemu-microbit")]
    const TX_PIN: u32 = 24;
    #[cfg(feature = "nrf52840-dk")]
    const TX_PIN: u32 = 6;

    pub fn init() {
        PSELTXD.write(TX_PIN);
        BAUDRATE.write(0x01D7_E000); // 115200 baud
        ENABLE.write(4);
        STARTTX.write(1);
    }

    pub fn put(b: u8) -> bool {
        TXDRDY.write(0);
        TXD.write(u32::from(b));
        super::wait(|| TXDRDY.read() != 0)
    }

    pub fn flush() -> bool {
        true
    }
}

/// STM32F411 USART2 at 0x4000_4400 (RM0383 rev 3, section 19.6: SR 0x00 with TXE bit 7 and TC
/// bit 6, DR 0x04, BRR 0x08, CR1 0x0C with UE bit 13 and TE bit 3), on PA2 (AF7): the
/// Nucleo-F411RE's ST-LINK virtual COM port (UM1724, section 6.8).
#[cfg(feature = "stm32f411-nucleo")]
mod imp {
    use super::Reg;
    const BASE: usize = 0x4000_4400;
    const SR: Reg = Reg(BASE);
    const DR: Reg = Reg(BASE + 0x04);
    const BRR: Reg = Reg(BASE + 0x08);
    const CR1: Reg = Reg(BASE + 0x0C);
    const RCC_AHB1ENR: Reg = Reg(0x4002_3800 + 0x30);
    const RCC_APB1ENR: Reg = Reg(0x4002_3800 + 0x40);
    const GPIOA_MODER: Reg = Reg(0x4002_0000);
    const GPIOA_AFRL: Reg = Reg(0x4002_0000 + 0x20);

    pub fn init() {
        RCC_AHB1ENR.write(RCC_AHB1ENR.read() | 1); // GPIOA
        RCC_APB1ENR.write(RCC_APB1ENR.read() | (1 << 17)); // USART2
        GPIOA_MODER.write((GPIOA_MODER.read() & !(0b11 << 4)) | (0b10 << 4)); // PA2: AF
        GPIOA_AFRL.write((GPIOA_AFRL.read() & !(0xF << 8)) | (7 << 8)); // AF7: USART2
                                                                        // 16 MHz HSI (the reset clock) / (16 · 115200) = 8.68: mantissa 8, fraction 11/16.
        BRR.write((8 << 4) | 11);
        CR1.write((1 << 13) | (1 << 3));
    }

    pub fn put(b: u8) -> bool {
        let ready = super::wait(|| SR.read() & (1 << 7) != 0);
        DR.write(u32::from(b));
        ready
    }

    pub fn flush() -> bool {
        super::wait(|| SR.read() & (1 << 6) != 0)
    }
}
