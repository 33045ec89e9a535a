# Sourced by run and demo (after kernel.sh): the test VM's root filesystem and qemu command.

# make_rootfs DIR BUSYBOX: busybox with its applets, mount points, and the kernel config at
# /boot/config-$KVER (libbpf resolves CONFIG_* externs from there; Debian's kernel has no
# /proc/config.gz). Binaries and /init are the caller's.
make_rootfs() {
    local root=$1 busybox=$2 applet
    mkdir -p "$root"/{bin,dev,proc,sys,tmp,boot}
    cp "$busybox" "$root/bin/busybox"
    # `busybox --list` names busybox itself; a self-symlink would make exec fail with ELOOP.
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    cp "$KDIR/config" "$root/boot/config-$KVER"
}

# pack_initramfs DIR OUT: uncompressed newc archive (unpacking beats decompressing under TCG).
pack_initramfs() {
    ( cd "$1" && find . | cpio -o -H newc -R 0:0 --quiet ) >"$2"
}

# qemu_argv INITRD CMDLINE: the qemu command line in the array QEMU_ARGV. TCG, because KVM
# does not work on these machines; -net none skips iPXE; debug-threads names the vCPU
# threads ("CPU 0/TCG"), whose run-queue waits tests/vm/run reports as host noise.
# tsc=reliable: the guest's clocksource watchdog compares the TSC with the HPET over
# half a second, and a vCPU the host did not run between the two reads looks like skew:
# in a CI run under full load (stress) the kernel marked the TSC unstable ("frequency
# skew", 512.0 ms of TSC against 511.7 ms of HPET) and switched to the HPET, whose every
# read is an emulated device access; every scenario after it in that boot failed
# (usage 0.23-0.96 of limits held to 2-5 %). Under TCG both clocks follow the host's.
#
# Topology: SCXBW_VM_SMP is qemu's -smp (e.g. 8,sockets=2,cores=4: one LLC per socket;
# 8,sockets=1,cores=4,threads=2 for SMT), SCXBW_VM_NUMA=N splits the CPUs into N NUMA
# nodes of equal size, each with its own memory (qemu 7.2 refuses -numa node,cpus=
# without a memory backend), SCXBW_VM_MEM the total memory (default 1G, 2G with NUMA).
qemu_argv() {
    local smp=${SCXBW_VM_SMP:-2} nodes=${SCXBW_VM_NUMA:-1} mem numa=() n per mb
    mem=${SCXBW_VM_MEM:-$([ "$nodes" -gt 1 ] && echo 2G || echo 1G)}
    if [ "$nodes" -gt 1 ]; then
        n=${smp%%,*}
        per=$((n / nodes))
        case "$mem" in *G) mb=$(( ${mem%G} * 1024 )) ;; *M) mb=${mem%M} ;; *) mb=$mem ;; esac
        for i in $(seq 0 $((nodes - 1))); do
            numa+=(-object "memory-backend-ram,size=$((mb / nodes))M,id=m$i"
                -numa "node,memdev=m$i,cpus=$((i * per))-$((i * per + per - 1))")
        done
    fi
    QEMU_ARGV=(qemu-system-x86_64 -name scxbw,debug-threads=on -accel tcg,thread=multi -cpu max
        -smp "$smp" -m "$mem" "${numa[@]}"
        -kernel "$KDIR/vmlinuz" -initrd "$1" -append "tsc=reliable${2:+ $2}"
        -nographic -no-reboot -net none)
}

# The mounts every guest needs: sched_ext and scx_utils read proc and sysfs, cgroup2 with the
# cpu controller makes cgroup limits and the scheduler's cgroup ops matter.
GUEST_MOUNTS='export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo +cpu > /sys/fs/cgroup/cgroup.subtree_control'
