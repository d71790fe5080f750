package pgcluster

import "syscall"

// sysProcAttr runs the server as cred (nil: this process's user) in its own
// process group, and has the kernel kill it if this process dies without
// stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
