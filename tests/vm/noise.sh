# shellcheck shell=bash
# Sourced by tests/vm/run and tests/vm/systemd: whether a failed scenario's verdict line
# (with hostwatch's host figures) says the host was busy, so that a fresh boot may retry it.

# A failure is the host's, not ours, when the host took this much of its CPU capacity from
# qemu during the scenario: steal + an injected stall, plus what other processes here took.
# That last part is qemu's vCPU run-queue wait while the guest has no more vCPUs than the
# host has CPUs; with more (8 vCPUs on 2 host CPUs), the vCPU threads wait behind each other
# even on a quiet host (120-250 % measured), so there it is the other processes' CPU time
# (host_other_pct). See tests/vm/README.md for the measurements behind the figure.
#
# The vCPU wait undercounts a load that does not yield (nice 0, realtime) while the guest
# keeps one vCPU busy: the idle vCPU waits for nothing, so a scenario with one busy task lost
# a tenth of it at 4.8 % of the host. So the same host is also noisy when other processes at
# nice <= 0 (host_other_pct - host_niced_pct) took more than SCXBW_LOAD_PCT (default 10 %)
# of its capacity: a niced build does not count there, it yields to qemu.
noise_limit=${SCXBW_NOISE_PCT:-5}
load_limit=${SCXBW_LOAD_PCT:-10}
vcpus=${SCXBW_VM_SMP:-2}; vcpus=${vcpus%%,*}
noise_from=wait; [ "$vcpus" -le "$(nproc)" ] || noise_from=other
noise_of() {   # a verdict line -> "NOISE LOAD": steal + wait or other (+ injected stall), and
               # steal + unniced other (+ stall, "-" in the wide set); "quiet" without figures
    awk -v from="host_${noise_from}_pct=" '{ s = ""; w = ""; st = 0; o = ""; ni = 0
           for (i = 1; i <= NF; i++) { if ($i ~ /^host_steal_pct=/) s = substr($i, 16)
                                       if (index($i, from) == 1) w = substr($i, length(from) + 1)
                                       if ($i ~ /^host_other_pct=/) o = substr($i, 16)
                                       if ($i ~ /^host_niced_pct=/) ni = substr($i, 16)
                                       if ($i ~ /^host_stall_pct=/) st = substr($i, 16) }
           if (s == "" || w == "") { print "quiet"; exit }
           l = (from == "host_other_pct=" || o == "") ? "-" : sprintf("%.1f", s + st + o - ni)
           printf "%.1f %s\n", s + w + st, l }' <<<"$1"
}
is_noisy() {
    [ "$1" != quiet ] && awk -v n="$1" -v l="$noise_limit" -v ll="$load_limit" \
        'BEGIN { split(n, f, " "); exit !(f[1] > l || (f[2] != "-" && f[2] > ll)) }'
}
noise_text() {   # "NOISE LOAD" -> words for the log
    local n=${1% *} l=${1#* }
    if [ "$1" = quiet ]; then echo "no host figures"
    elif [ "$l" = - ]; then echo "noise $n % > $noise_limit %"
    else echo "noise $n % (limit $noise_limit %), unniced load $l % (limit $load_limit %)"; fi
}
host_of() { grep -oE "host_(steal|$noise_from|other|niced|stall)_pct=[0-9.]+" <<<"$1" | paste -sd' ' -; }
