package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// throttleName is the cgroup a throttled process is moved into, under the
// cpu controller's root (cgroup v1) or the unified root (v2).
const throttleName = Prefix + "throttle"

// cpuRoot returns the cgroup root that holds the cpu controller and
// whether it is cgroup v2. Where /sys/fs/cgroup does not show it (under
// `ip netns exec`, which mounts a sysfs of its own without the cgroup
// mounts), it mounts the cpu controller's hierarchy (v1) or the unified
// one (v2) on a directory of tb's and unmounts it at cleanup.
func cpuRoot(tb testing.TB) (root string, v2 bool, err error) {
	if root, v2, ok := findCPURoot("/sys/fs/cgroup"); ok {
		return root, v2, nil
	}
	dir := tb.TempDir()
	for _, fs := range [][]string{{"-t", "cgroup", "-o", "cpu"}, {"-t", "cgroup2"}} {
		if out, err := exec.Command("mount", append(fs, "none", dir)...).CombinedOutput(); err != nil {
			tb.Logf("throttle: mount %v: %v %s", fs, err, out)
			continue
		}
		tb.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			return dir, true, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
			return dir, false, nil
		}
		_ = exec.Command("umount", dir).Run()
	}
	return "", false, errors.New("no cgroup cpu controller: none at /sys/fs/cgroup (v2) or /sys/fs/cgroup/cpu (v1), and mounting one failed")
}

// findCPURoot looks for the cpu controller under the cgroup mount point
// base: the unified root (v2) or its cpu hierarchy (v1).
func findCPURoot(base string) (root string, v2, ok bool) {
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
		return base, true, true
	}
	if _, err := os.Stat(filepath.Join(base, "cpu", "cpu.cfs_quota_us")); err == nil {
		return filepath.Join(base, "cpu"), false, true
	}
	return "", false, false
}

// throttle limits process pid, every thread of it, to quota of CPU time in
// each period (the kernel's CPU bandwidth control, in a cgroup of its own),
// as a host whose cores other work keeps busy leaves a process its share
// and no more. Nothing else on the machine is slowed. It returns the undo:
// the process back in the root cgroup, the cgroup removed (also a test
// cleanup).
func throttle(tb testing.TB, pid int, quota, period time.Duration) (undo func()) {
	tb.Helper()
	root, v2, err := cpuRoot(tb)
	if err != nil {
		tb.Fatalf("throttle: %v", err)
	}
	dir := filepath.Join(root, throttleName)
	write := func(path, value string) {
		tb.Helper()
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			tb.Fatalf("throttle: write %q to %s = got error %v, want nil", value, path, err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		tb.Fatalf("throttle: %v", err)
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	if v2 {
		write(filepath.Join(root, "cgroup.subtree_control"), "+cpu")
		write(filepath.Join(dir, "cpu.max"), us(quota)+" "+us(period))
	} else {
		write(filepath.Join(dir, "cpu.cfs_period_us"), us(period))
		write(filepath.Join(dir, "cpu.cfs_quota_us"), us(quota))
	}
	write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid))
	done := false
	undo = func() {
		if done {
			return
		}
		done = true
		// The fault must have been injected: the kernel held the process
		// back at least once.
		if raw, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err != nil {
			tb.Errorf("throttle: %v", err)
		} else if n := statField(string(raw), "nr_throttled"); n < 1 {
			tb.Errorf("throttle: process %d was never throttled (cpu.stat: %q): the CPU hog was not injected", pid, raw)
		} else {
			tb.Logf("throttle: process %d throttled in %d periods (cpu.stat %q)", pid, n, strings.Join(strings.Fields(string(raw)), " "))
		}
		// Back to the root; a process that has exited is gone from it.
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			tb.Logf("throttle: remove %s: %v", dir, err)
		}
	}
	tb.Cleanup(undo)
	return undo
}

// removeThrottle removes the cgroup a crashed run left (its processes are
// dead: Pdeathsig), where /sys/fs/cgroup shows it.
func removeThrottle() error {
	root, _, ok := findCPURoot("/sys/fs/cgroup")
	if !ok {
		return nil
	}
	if err := os.Remove(filepath.Join(root, throttleName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove leftover cgroup: %w", err)
	}
	return nil
}

// statField returns the value of name in a cgroup stat file ("name value"
// lines), -1 if it is absent.
func statField(stat, name string) int64 {
	for _, line := range strings.Split(stat, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
