#!/usr/bin/env bash
# Install everything a fresh Debian bookworm machine needs to build scx_bandwidth and to boot
# Debian's sched_ext kernel under qemu: the build toolchain (clang-19, libelf, zlib), qemu,
# busybox for the initramfs, and the kernel package itself (trixie-backports), extracted
# into a cache directory without installing it. Idempotent: a second run is quick.
set -euo pipefail

# shellcheck source=tests/vm/kernel.sh
. "$(dirname "${BASH_SOURCE[0]}")/kernel.sh"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

need_pkgs=()
for p in clang-19 libclang-19-dev llvm-19 libelf-dev zlib1g-dev pkg-config qemu-system-x86 \
         busybox-static cpio mmdebstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
done

src=/etc/apt/sources.list.d/trixie-backports.sources
if [ ! -f "$src" ]; then
    # Same mirror as the machine's bookworm entry; only the kernel is taken from it.
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    uri="${uri:-http://deb.debian.org/debian}"
    $SUDO tee "$src" >/dev/null <<SRC
Types: deb
URIs: $uri
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fresh_sources=1
fi

if [ "${#need_pkgs[@]}" -gt 0 ] || [ -n "${fresh_sources:-}" ] || [ ! -f "$KDIR/vmlinuz" ]; then
    $SUDO apt-get update -qq
fi
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    # The image may carry a backported qemu-utils that Breaks bookworm's qemu-system-common;
    # take both from bookworm so they agree (qemu-utils is not used by the project).
    pkgs=()
    for p in "${need_pkgs[@]}"; do
        case "$p" in qemu-system-x86) pkgs+=("qemu-system-x86/bookworm" "qemu-utils/bookworm") ;;
                     *) pkgs+=("$p") ;; esac
    done
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        --allow-downgrades "${pkgs[@]}"
fi

kdir="$KDIR"
if [ ! -f "$kdir/vmlinuz" ] || [ ! -f "$kdir/config" ]; then
    tmp=$(mktemp -d); chmod 755 "$tmp"   # apt-get download runs as _apt
    ( cd "$tmp" && apt-get download -qq "linux-binary-$KVER" "linux-base-$KVER" )
    mkdir -p "$kdir"
    for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
    cp "$tmp/x/usr/lib/modules/$KVER/vmlinuz" "$kdir/vmlinuz" 2>/dev/null \
        || cp "$tmp/x/boot/vmlinuz-$KVER" "$kdir/vmlinuz"
    cfg=$(find "$tmp/x" -name "config-$KVER" -o -name config -path "*$KVER*" | head -n1)
    [ -n "$cfg" ] && cp "$cfg" "$kdir/config"
    rm -rf "$tmp"
fi
grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$kdir/config" \
    || { echo "setup: $kdir/config lacks CONFIG_SCHED_CLASS_EXT=y" >&2; exit 1; }

# promtool (Prometheus' checker, for the scrape of the `metrics` VM scenario), taken out of
# Debian's prometheus package without installing it: installed, the package would start a
# Prometheus server on this machine. promtool checks the metrics text here; the server runs
# in tests/vm/systemd's guest. (PROMTOOL, PROMETHEUS: kernel.sh.)
if [ ! -x "$PROMTOOL" ] || [ ! -x "$PROMETHEUS" ]; then
    tmp=$(mktemp -d); chmod 755 "$tmp"
    ( cd "$tmp" && apt-get download -qq prometheus )
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    mkdir -p "$(dirname "$PROMTOOL")"
    cp "$tmp/x/usr/bin/promtool" "$PROMTOOL"
    cp "$tmp/x/usr/bin/prometheus" "$PROMETHEUS"
    rm -rf "$tmp"
fi

# tests/vm/systemd's guest: Debian bookworm with systemd as init, from Debian's packages
# (mmdebstrap needs no root mount; docs, man pages and locales left out).
if [ ! -f "$ROOTFS_TAR" ]; then
    mkdir -p "$(dirname "$ROOTFS_TAR")"
    mmdebstrap --format=tar --variant=minbase --include=systemd,systemd-sysv,dbus,procps \
        --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
        bookworm "$ROOTFS_TAR.tmp" "$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)"
    mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
fi

# cargo-deb builds the Debian package (Cargo.toml's [package.metadata.deb]).
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi

if ! rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-linux-gnu; then
    rustup target add x86_64-unknown-linux-gnu
fi
echo "setup: toolchain ready, kernel $KVER in $kdir"
