#!/usr/bin/env bash
# The cargo runner (.cargo/config.toml): runs a firmware ELF built for a QEMU board under QEMU,
# picking the machine from the target folder in its path (each QEMU board has its own core:
# thumbv7em → qemu-mps2-an386, thumbv7m → qemu-lm3s6965evb, thumbv6m → qemu-microbit; a
# real board's ELF is flashed with probe-rs, not run here). The transcript leaves through the
# board's UART (`-serial file:$ELF.transcript`) and is printed when the run ends; defmt's frames
# (semihosting stdout) are decoded with `defmt-print` when it is installed, else written raw to
# $ELF.defmt. Exits with the firmware's status (0: trained and sent everything).
#
# To verify while it runs: `tapeplan verify --serial $ELF.transcript --config RUN` in another
# shell (it follows the file as it grows).
#
# Env: QEMU_TIMEOUT (seconds, default 600).
set -euo pipefail
elf="$1"
case "$elf" in
  *thumbv7em-none-eabihf*) machine=(-machine mps2-an386 -cpu cortex-m4) ;;
  *thumbv7m-none-eabi*) machine=(-machine lm3s6965evb) ;;
  *thumbv6m-none-eabi*) machine=(-machine microbit) ;;
  *) echo "qemu-run: cannot tell the core of $elf" >&2; exit 2 ;;
esac
command -v qemu-system-arm >/dev/null || {
  echo "qemu-run: qemu-system-arm is missing (apt-get install qemu-system-arm)" >&2; exit 2; }
qemu=(timeout "${QEMU_TIMEOUT:-600}" qemu-system-arm "${machine[@]}" -nographic -monitor none
  -serial "file:$elf.transcript" -semihosting-config enable=on,target=native -kernel "$elf")
status=0
if command -v defmt-print >/dev/null; then
  "${qemu[@]}" | defmt-print -e "$elf" || status=$?
else
  echo "qemu-run: defmt-print not installed (cargo install defmt-print): defmt frames in $elf.defmt" >&2
  "${qemu[@]}" > "$elf.defmt" || status=$?
fi
cat "$elf.transcript" >&2
exit "$status"
