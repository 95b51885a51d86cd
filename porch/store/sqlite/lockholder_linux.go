//go:build cgo

package sqlite

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// holderOf finds the process holding the flock on the file id, and the path
// it opened the file by, for an error that names both paths. The kernel
// lists flocks in /proc/locks by pid and inode; the pid's open descriptors
// in /proc/PID/fd say which is the file and by what name. Either may be
// unreadable (another pid namespace, no permission), and then ok is false.
func holderOf(id fileID) (pid int, path string, ok bool) {
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, "", false
	}
	for _, pid := range flockHolders(locks, id.ino) {
		if path, ok := openedAs(pid, id); ok {
			return pid, path, true
		}
	}
	return 0, "", false
}

// flockHolders parses /proc/locks, lines such as
//
//	1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF
//	1: -> FLOCK  ADVISORY  WRITE 4243 fd:01:1234567 0 EOF
//
// and returns the pids granted (not waiting for, "->") an exclusive flock on
// inode ino. The device is left to openedAs: /proc/locks prints the
// superblock's, which is not stat's st_dev on btrfs or overlayfs.
func flockHolders(locks []byte, ino uint64) []int {
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(locks))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
			continue
		}
		dmi := strings.Split(f[5], ":")
		if n, err := strconv.ParseUint(dmi[len(dmi)-1], 10, 64); err != nil || n != ino {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// openedAs returns the name by which process pid has the file id open.
func openedAs(pid int, id fileID) (string, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, fd := range fds {
		link := filepath.Join(dir, fd.Name())
		fi, err := os.Stat(link) // follows the link to the open file
		if err != nil {
			continue
		}
		if got, ok := idOf(fi); !ok || got != id {
			continue
		}
		if path, err := os.Readlink(link); err == nil {
			return path, true
		}
	}
	return "", false
}
