package dbha

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/test/internal/dbtier"
)

// pgbackrestConf is the shipped pgBackRest configuration.
const pgbackrestConf = "../../deploy/pgbackrest/pgbackrest.conf"

// drill is one PostgreSQL with WAL archiving to a pgBackRest repository,
// run as the postgres OS user.
type drill struct {
	t     *testing.T
	dir   string
	cred  *syscall.Credential
	conf  string // pgbackrest.conf written for the run
	sock  string
	pg    *exec.Cmd
	pgEnd chan struct{}
}

// writeConf writes the shipped pgbackrest.conf with the run's paths and
// port for the data directory data.
func (dr *drill) writeConf(data string, port int) {
	t := dr.t
	raw, err := os.ReadFile(pgbackrestConf)
	if err != nil {
		t.Fatal(err)
	}
	over := map[string]string{
		"repo1-path":      filepath.Join(dr.dir, "repo"),
		"log-path":        filepath.Join(dr.dir, "log"),
		"pg1-path":        data,
		"pg1-socket-path": dr.sock,
		"pg1-port":        strconv.Itoa(port),
	}
	var out bytes.Buffer
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			if v, ok := over[k]; ok {
				line, seen[k] = k+"="+v, true
			}
		}
		out.WriteString(line + "\n")
		if line == "[global]" {
			// The lock directory is the package's default under /tmp;
			// keep it in the run's directory.
			out.WriteString("lock-path=" + filepath.Join(dr.dir, "lock") + "\n")
		}
	}
	for k := range over {
		if !seen[k] {
			t.Fatalf("%s has no %s", pgbackrestConf, k)
		}
	}
	dr.conf = filepath.Join(dr.dir, "pgbackrest.conf")
	if err := os.WriteFile(dr.conf, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// as runs argv as the postgres OS user and returns its output; it fails
// the test if the command fails.
func (dr *drill) as(argv ...string) string {
	dr.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: dr.cred}
	cmd.Dir = dr.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dr.dir, "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		dr.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func (dr *drill) pgbackrest(args ...string) string {
	dr.t.Helper()
	return dr.as(append([]string{"pgbackrest", "--config=" + dr.conf, "--stanza=repool"}, args...)...)
}

// startPG starts PostgreSQL on data at port with WAL archived by
// pgbackrest archive-push, as docs/ha.md sets it on the tier.
func (dr *drill) startPG(data string, port int) {
	t := dr.t
	t.Helper()
	args := append(pgcluster.ServerArgs(data, "127.0.0.1", port, dr.sock),
		"-c", "wal_level=replica", "-c", "archive_mode=on",
		"-c", "archive_command=pgbackrest --config="+dr.conf+" --stanza=repool archive-push %p",
		// The pgcluster defaults favour speed; a backup drill wants WAL
		// flushed as a real deployment would.
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on")
	logf, err := os.Create(filepath.Join(dr.dir, fmt.Sprintf("postgres-%d.log", port)))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(pgcluster.BinDir(), "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: dr.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dr.dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dr.pg, dr.pgEnd = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(dr.pgEnd)
	testenv.Eventually(t, 60*time.Second, "PostgreSQL to accept connections", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var inRecovery bool
		return c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery) == nil && !inRecovery
	})
}

// stopPG stops PostgreSQL with a fast shutdown.
func (dr *drill) stopPG() {
	if dr.pg == nil {
		return
	}
	dr.pg.Process.Signal(syscall.SIGINT)
	select {
	case <-dr.pgEnd:
	case <-time.After(30 * time.Second):
		syscall.Kill(-dr.pg.Process.Pid, syscall.SIGKILL)
		<-dr.pgEnd
	}
	dr.pg = nil
}

// startServer starts one repool server in HA mode on dsn and returns a
// pool client, the server's first-start banner and a stop function.
func startServer(t *testing.T, dsn, logPath string) (repoolv1.PoolServiceClient, string, func()) {
	t.Helper()
	pool, banner, _, stop := startServerHTTP(t, dsn, logPath, true)
	return pool, banner, stop
}

// startServerHTTP is startServer, in HA mode or not, and also returns the
// server's HTTP address.
func startServerHTTP(t *testing.T, dsn, logPath string, ha bool) (repoolv1.PoolServiceClient, string, string, func()) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var banner syncWriter
	// A global resource budget of 500,000: the demo tenant's share (25 %)
	// holds the drill's 100,800 resources.
	s, err := server.New(context.Background(), server.Config{Store: dsn, HA: ha, HAName: "drill",
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", GlobalResources: 500_000},
		server.Options{Log: slog.New(slog.NewTextHandler(logf, nil)), Out: &banner})
	if err != nil {
		t.Fatalf("server on %s: New() = %v", dsn, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r := &repoolServer{s: s}
	testenv.Eventually(t, 30*time.Second, "the server to become active", func() bool { return activeStatus(r) == 200 })
	stop := func() {
		conn.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("server on %s did not stop within 20 s", dsn)
		}
		logf.Close()
	}
	return repoolv1.NewPoolServiceClient(conn), banner.String(), s.HTTPAddr(), stop
}

// register registers n resources named prefix-i.
func register(t *testing.T, ctx context.Context, pool repoolv1.PoolServiceClient, prefix string, n int) {
	t.Helper()
	for from := 0; from < n; from += 500 {
		var rs []*repoolv1.Resource
		for i := from; i < min(n, from+500); i++ {
			rs = append(rs, &repoolv1.Resource{Id: fmt.Sprintf("%s-%d", prefix, i)})
		}
		if _, err := pool.Register(ctx, &repoolv1.RegisterRequest{Resources: rs}); err != nil {
			t.Fatalf("Register(%s) = %v", prefix, err)
		}
	}
}

// TestBackupRestore drills docs/ha.md's backup and point-in-time restore
// with pgBackRest and the shipped pgbackrest.conf: a full backup of a
// PostgreSQL that archives its WAL, more writes, a target time, writes
// after it; then a restore to the target time into a new data directory
// and a server started on it. Everything registered before the target
// (in the backup, and after it in the archived WAL) comes back, nothing
// after it does, the lease journaled before the target renews with its id
// and token, and new tokens are above the old ones.
func TestBackupRestore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("%s runs PostgreSQL and pgBackRest as the postgres OS user and must run as root (euid %d); run scripts/test as root", t.Name(), os.Geteuid())
	}
	if _, err := exec.LookPath("pgbackrest"); err != nil {
		t.Fatalf("pgbackrest: %v (scripts/test installs it)", err)
	}
	cred, uid, gid := dbtier.PostgresCred(t)
	dir, err := os.MkdirTemp("", "repool-drill-")
	if err != nil {
		t.Fatal(err)
	}
	dr := &drill{t: t, dir: dir, cred: cred, sock: filepath.Join(dir, "run")}
	t.Cleanup(func() {
		dr.stopPG()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("run directory kept: %s", dir)
		}
	})
	defer func() {
		if t.Failed() {
			files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			for _, f := range append(files, logs...) {
				raw, _ := os.ReadFile(f)
				if len(raw) > 5000 {
					raw = raw[len(raw)-5000:]
				}
				t.Logf("==== %s (tail)\n%s", filepath.Base(f), raw)
			}
		}
	}()
	for _, d := range []string{dir, dr.sock, filepath.Join(dir, "repo"), filepath.Join(dir, "log"), filepath.Join(dir, "lock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)

	data := filepath.Join(dir, "data")
	port := freePortOn(t, "127.0.0.1")
	dr.writeConf(data, port)
	dr.as(append([]string{filepath.Join(pgcluster.BinDir(), "initdb")}, pgcluster.InitdbArgs(data)...)...)
	dr.startPG(data, port)
	dr.as(filepath.Join(pgcluster.BinDir(), "psql"), "-X", "-q", "-h", dr.sock, "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres", "-c", "CREATE DATABASE repool")
	dr.pgbackrest("stanza-create")
	dr.pgbackrest("check")
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/repool?sslmode=disable", port)

	const inBackup, inWAL, after = 100_000, 500, 300
	pool, banner, stop := startServer(t, dsn, filepath.Join(dir, "server-1.log"))
	key := demoKey(banner)
	if key == "" {
		t.Fatal("no demo API key in the first server's banner")
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	register(t, ctx, pool, "backup", inBackup)
	acq, err := pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "drill", TtlSeconds: 3600})
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	held := acq.GetLease()

	start := time.Now()
	backupOut := dr.pgbackrest("backup", "--type=full")
	backupTook := time.Since(start)
	_, label, ok := strings.Cut(backupOut, "new backup label = ")
	if !ok {
		t.Fatalf("no backup label in pgbackrest backup's output:\n%s", backupOut)
	}
	label = strings.Fields(label)[0]

	register(t, ctx, pool, "wal", inWAL)
	// The target: a moment after the WAL writes were committed, read from
	// the database's own clock.
	var target string
	func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if err := c.QueryRow(context.Background(), `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'`).Scan(&target); err != nil {
			t.Fatal(err)
		}
	}()
	// Commits after the target (a restore to the target stops at the
	// first of them), then every WAL segment archived: check switches to
	// a new segment and waits until the last one is in the repository.
	register(t, ctx, pool, "after", after)
	stop()
	dr.pgbackrest("check")
	dr.stopPG()

	restored := filepath.Join(dir, "restored")
	start = time.Now()
	// --set names the backup: pgbackrest picks one by its stop time in
	// whole seconds, which a target within the second the backup ended
	// does not pass.
	dr.pgbackrest("--pg1-path="+restored, "--set="+label, "--type=time", "--target="+target, "--target-action=promote", "restore")
	restoreTook := time.Since(start)
	port2 := freePortOn(t, "127.0.0.1")
	dr.writeConf(restored, port2) // archiving of the restored cluster goes on, on a new timeline
	start = time.Now()
	dr.startPG(restored, port2)
	replayTook := time.Since(start)

	dsn2 := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/repool?sslmode=disable", port2)
	start = time.Now()
	pool2, _, stop2 := startServer(t, dsn2, filepath.Join(dir, "server-2.log"))
	serverTook := time.Since(start)
	defer stop2()
	// Every resource the restored store serves, counted by prefix through
	// ListResources.
	counts := map[string]int{}
	for token := ""; ; {
		page, err := pool2.ListResources(ctx, &repoolv1.ListResourcesRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("ListResources on the restored store = %v", err)
		}
		for _, r := range page.GetResources() {
			prefix, _, _ := strings.Cut(r.GetId(), "-")
			counts[prefix]++
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	gotBackup, gotWAL, gotAfter := counts["backup"], counts["wal"], counts["after"]
	if gotBackup != inBackup || gotWAL != inWAL || gotAfter != 0 {
		t.Errorf("restored to %s: resources in the backup %d of %d, from the WAL before the target %d of %d, after the target %d (want 0)",
			target, gotBackup, inBackup, gotWAL, inWAL, gotAfter)
	}
	if _, err := pool2.Renew(ctx, &repoolv1.RenewRequest{LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Errorf("Renew(the lease journaled before the backup) on the restored store = %v, want it held with its id and token", err)
	}
	next, err := pool2.Acquire(ctx, &repoolv1.AcquireRequest{Context: "drill", TtlSeconds: 60})
	if err != nil {
		t.Fatalf("Acquire on the restored store = %v", err)
	}
	if next.GetLease().GetFencingToken() <= held.GetFencingToken() {
		t.Errorf("token after the restore %d, want above %d (the epoch's clock floor)", next.GetLease().GetFencingToken(), held.GetFencingToken())
	}
	t.Logf("measure: drill_backup_s=%.2f (full backup, %d resources)", backupTook.Seconds(), inBackup)
	t.Logf("measure: drill_restore_s=%.2f (pgbackrest restore) drill_replay_s=%.2f (PostgreSQL start with WAL replay to the target)", restoreTook.Seconds(), replayTook.Seconds())
	t.Logf("measure: drill_server_active_s=%.2f (a server started on the restored store until it serves)", serverTook.Seconds())
	t.Logf("measure: drill_resources_restored=%d of %d before the target, %d of %d after it", gotBackup+gotWAL, inBackup+inWAL, gotAfter, after)
}
