#!/usr/bin/env bash
# Runs commands inside a QEMU guest with two NUMA nodes, to test what a one-node machine cannot: memory
# domains, per-node thread pinning, node-local allocations and one model replica per node.
#
#   test/numa/run_numa_guest.sh                  the NUMA-sensitive tests of ./build (ctest's commands)
#   test/numa/run_numa_guest.sh --tests REGEX    the tests of ./build whose names match REGEX
#   test/numa/run_numa_guest.sh COMMAND...       COMMAND, in bash, from the repository's root
#
# The guest is Debian's own kernel (linux-image-amd64) booted by QEMU (qemu-system-x86) with an
# initramfs of busybox-static and the kernel's 9p modules; it mounts this machine's root file system
# read-only over virtio-9p, puts a tmpfs on /tmp, and runs COMMAND in /work/main's checkout (this
# script's repository) as root, then powers off. Topology: 2 vCPUs and 4 GiB, node 0 = CPU 0 and
# 2 GiB, node 1 = CPU 1 and 2 GiB (QEMU's -numa, so the guest kernel's sysfs, libnuma, mbind and
# get_mempolicy see two real nodes). QEMU emulates the CPU (TCG, `-cpu max`: what QEMU 7.2 implements, up to
# AVX2 and FMA, no AVX-512): slow, but placement is what is tested, not speed; nested KVM was tried and
# hangs the guest's kernel on the development VMs. Installs the Debian packages it needs
# (qemu-system-x86, linux-image-amd64, busybox-static, rsync) when missing. In --tests mode the tests
# run from a snapshot of ./build (.numa-guest-build, rsync): a rebuild here cannot change a binary
# under the running guest. Each test's last lines and exit status are
# printed; the guest's exit status, printed as "guest exit status: N" and returned, counts the failed
# tests (a skip, 77, is not a failure). Under emulation the default set takes about 15-30 minutes.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
packages=()
command -v rsync > /dev/null || packages+=(rsync)
command -v qemu-system-x86_64 > /dev/null || packages+=(qemu-system-x86)
command -v busybox > /dev/null || packages+=(busybox-static)
ls /boot/vmlinuz-* > /dev/null 2>&1 || packages+=(linux-image-amd64)
if ((${#packages[@]})); then
    sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -q "${packages[@]}"
fi
kernel="$(ls /boot/vmlinuz-* | sort -V | tail -1)"
release="${kernel#/boot/vmlinuz-}"
# The tests whose behaviour depends on the topology: domains and placement, executors' pinning, node-local
# scratch, model replicas per node, encodes over threads of both nodes, pools.
default_tests='^(test_numa|test_executor|test_executor_misuse|test_pool|test_model|test_encode|test_encode_verb|test_encode_minilm_numa|test_text_plan|test_gemm_pack)$'

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,mnt,modules}
# The guest's script: COMMAND, or each test ctest lists for the regex (its command, arguments, working
# directory and environment as ctest would run it), its log's tail and exit status, then the count of
# failures (skips, 77, are not failures) as the guest's exit status.
if [ "${1:-}" = "--tests" ] || (($# == 0)); then
    regex="${2:-$default_tests}"
    # The tests run from a snapshot of the build (less the Mojo toolchain), so rebuilding here while the
    # guest runs cannot change a binary under it.
    snapshot="$repo/.numa-guest-build"
    rsync -a --delete --exclude mojo-venv "$repo/build/" "$snapshot/"
    ctest --test-dir "$repo/build" -N -V -R "$regex" | sed "s|$repo/build/|$snapshot/|g; s|$repo/build\$|$snapshot|" | python3 -c '
import re, sys
tests, current = [], None
for line in sys.stdin:
    m = re.match(r"^\d+: Test command: (.*)$", line)
    if m: current = {"command": m.group(1), "env": [], "dir": "."}; continue
    m = re.match(r"^\d+: Working Directory: (.*)$", line)
    if m and current: current["dir"] = m.group(1); continue
    m = re.match(r"^\d+:  ([A-Za-z_][A-Za-z0-9_]*=.*)$", line)
    if m and current: current["env"].append(m.group(1)); continue
    m = re.match(r"^\s*Test\s+#\d+: (\S+)", line)
    if m and current: current["name"] = m.group(1); tests.append(current); current = None
print("failures=0")
for t in tests:
    env = " ".join("\"%s\"" % e for e in t["env"])
    print("echo \"=== %s\"" % t["name"])
    print("(cd \"%s\" && env %s %s) > /tmp/%s.log 2>&1; rc=$?" % (t["dir"], env, t["command"], t["name"]))
    print("tail -n 4 /tmp/%s.log; echo \"=== %s: exit $rc\"" % (t["name"], t["name"]))
    print("[ $rc = 0 ] || [ $rc = 77 ] || failures=$((failures + 1))")
print("echo \"guest: %d tests, $failures failed\"" % len(tests))
print("exit $failures")
' > "$root/command.sh"
else
    printf '%q ' "$@" > "$root/command.sh"
fi

cp "$(command -v busybox)" "$root/bin/busybox"
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p; do
    file="$(modinfo -k "$release" -n "$m")"
    case "$file" in
        *.ko) cp "$file" "$root/modules/$m.ko" ;;
        *.ko.xz) xz -dc "$file" > "$root/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$file" > "$root/modules/$m.ko" ;;
        *) echo "run_numa_guest: no module file for $m ($file)" >&2; exit 1 ;;
    esac
done
cat > "$root/init" << EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p; do
    insmod /modules/\$m.ko || echo "insmod \$m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=1048576,cache=loose hostroot /mnt || { echo "guest: no 9p root"; poweroff -f; }
mount -t proc proc /mnt/proc; mount -t sysfs sys /mnt/sys; mount -t devtmpfs dev /mnt/dev
mount -t tmpfs tmp /mnt/tmp; mount -t tmpfs run /mnt/run 2>/dev/null
echo "guest: nodes \$(cat /sys/devices/system/node/online) online; cpus by node: \$(cat /sys/devices/system/node/node*/cpulist | tr '\\n' ' ')"
cp /command.sh /mnt/tmp/command.sh
chroot /mnt /bin/bash -c "cd '$repo' && export HOME=/tmp PATH=/usr/local/bin:/usr/bin:/bin && bash /tmp/command.sh"
echo "guest exit status: \$?"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"
# UFORM_GUEST_NODES=1 boots the same guest with one node (both CPUs, 4 GiB), for comparison.
if [ "${UFORM_GUEST_NODES:-2}" = 1 ]; then
    topology=(-object memory-backend-ram,id=m0,size=4G -numa node,nodeid=0,cpus=0-1,memdev=m0)
else
    topology=(-object memory-backend-ram,id=m0,size=2G -object memory-backend-ram,id=m1,size=2G
              -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1)
fi
qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 4G -smp 2 \
    "${topology[@]}" \
    -kernel "$kernel" -initrd "$work/initrd.gz" -append "console=ttyS0 earlyprintk=ttyS0 loglevel=4 panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -nographic -no-reboot | tee "$work/console.txt"
status="$(sed -n 's/.*guest exit status: \([0-9]*\).*/\1/p' "$work/console.txt" | tail -1)"
exit "${status:-1}"
