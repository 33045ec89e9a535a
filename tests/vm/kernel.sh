# Sourced by setup.sh and run: the one place naming the test kernel and its cache.
# Debian's 7.3.4 kernel is the one with CONFIG_SCHED_CLASS_EXT=y and EXT_GROUP_SCHED=y
# (its 6.12 kernels lack sched_ext). Override with KVER / SCXBW_CACHE in the environment.
KVER="${KVER:-7.3.4+deb13-amd64}"
SCXBW_CACHE="${SCXBW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scx_bandwidth}"
KDIR="$SCXBW_CACHE/kernel/$KVER"
# promtool, extracted from Debian's prometheus package by setup.sh.
PROMTOOL="$SCXBW_CACHE/prometheus/promtool"
PROMETHEUS="$SCXBW_CACHE/prometheus/prometheus"
# The Debian userland with systemd for tests/vm/systemd, built by setup.sh (mmdebstrap).
ROOTFS_TAR="$SCXBW_CACHE/rootfs/bookworm-systemd.tar"
