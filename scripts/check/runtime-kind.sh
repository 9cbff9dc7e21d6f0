#!/usr/bin/env bash
# What this machine runs on, as far as compute-sanitizer cares: it attaches to the GPU through
# the driver's debugger interface, which a virtual machine with the GPU passed through has
# (Firecracker and other KVM guests, bare metal), and gVisor's GPU proxy does not (it forwards
# the ioctls that CUDA programs make, not those).
# Prints one line: KIND EVIDENCE, KIND one of
#   gvisor       /proc/version is gVisor's fixed "#1 SMP Sun Jan 10 15:06:54 PST 2016" (its kernel
#                version is made up, 4.4.0 or 4.19.0-gvisor), or its log says "Starting gVisor"
#   firecracker  the kernel's command line or log names Firecracker, or carries the virtio-mmio
#                device list Firecracker passes to its guests, or the DMI vendor is Firecracker
#   vm           another hypervisor (CPU flag "hypervisor"; its name from the kernel's log or DMI)
#   none         no hypervisor seen: bare metal, or a container on it
# Usage: runtime-kind.sh [ROOT]   ROOT (default /): where proc/ and sys/ are read, and ROOT/dmesg
#                                 instead of dmesg's output when ROOT is not / (for tests).
set -uo pipefail
root=${1:-/}
root=${root%/}
file() { cat "$root/$1" 2>/dev/null; }
if [[ -z "$root" ]]; then
  log=$(timeout 10 dmesg 2>/dev/null | head -2000)
else
  log=$(file dmesg)
fi
version=$(file proc/version)
cmdline=$(file proc/cmdline)
vendor=$(file sys/class/dmi/id/sys_vendor)
flags=$(grep -m1 '^flags' "$root/proc/cpuinfo" 2>/dev/null)

if [[ "$version" == *"Sun Jan 10 15:06:54 PST 2016"* || "$version" == *gvisor* ]]; then
  echo "gvisor /proc/version: ${version%%$'\n'*}"
elif grep -q 'Starting gVisor' <<<"$log"; then
  echo "gvisor the kernel log says: Starting gVisor"
elif grep -qi firecracker <<<"$cmdline"; then
  echo "firecracker the kernel command line names Firecracker"
elif grep -q 'virtio_mmio.device=' <<<"$cmdline"; then
  echo "firecracker the kernel command line lists virtio-mmio devices (Firecracker's way)"
elif grep -qi firecracker <<<"$vendor$log"; then
  echo "firecracker the DMI vendor or the kernel log names Firecracker"
elif [[ " $flags " == *" hypervisor "* ]]; then
  name=$(grep -o 'Hypervisor detected: .*' <<<"$log" | head -1)
  echo "vm CPU flag hypervisor; ${name:-no hypervisor named in the kernel log}${vendor:+; DMI vendor $vendor}"
else
  echo "none no hypervisor flag in /proc/cpuinfo${vendor:+; DMI vendor $vendor}"
fi
