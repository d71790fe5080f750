//go:build !linux

package pgcluster

import "syscall"

// sysProcAttr runs the server as cred (nil: this process's user) in its own
// process group. Without Linux's parent-death signal, a server whose parent
// is killed outright survives it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
