package ha

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/testenv"
)

// The leader's session under a slow and a silent network: a check whose
// answer is late but within the last confirmation keeps the term (a busy
// machine is not a lost session), and a check that is never answered ends
// the term before the database frees the lock for a standby.

// confirmInterval and confirmSession make confirmedFor 1.5 s: room on
// both sides of the 1 s answer delay, and 0.5 s between the end of a term
// and the database freeing the lock.
const (
	confirmInterval = 500 * time.Millisecond
	confirmSession  = 2 * time.Second
	answerDelay     = time.Second
)

// TestLateAnswerKeepsTheTerm: a check answered after 1 s, more than half
// of what is left of the session timeout but within the last
// confirmation, keeps the term: the next check is sent.
func TestLateAnswerKeepsTheTerm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := proxiedLeader(ctx, t)
	obs, p, fake, term := l.obs, l.p, l.fake, l.term
	last := lastQuery(ctx, t, obs)

	p.delay(answerDelay)
	start := time.Now()
	fake.Advance(confirmInterval)
	last = awaitCheck(ctx, t, obs, term, last, "the late-answered check")
	p.delay(0)
	// The late check's answer is in once the next check reaches the
	// database: the term kept going, or there would be no next check.
	fake.Advance(confirmInterval)
	awaitCheck(ctx, t, obs, term, last, "the check after the late one")
	if took := time.Since(start); took < answerDelay {
		t.Fatalf("two checks took %v, want at least the answer delay %v: the proxy did not slow the answer", took, answerDelay)
	}
	if err := term.Err(); err != nil {
		t.Fatalf("term.Err() after a check answered within the last confirmation = got %v, want nil", err)
	}
}

// TestSilenceEndsTheTermBeforeTheLockIsFreed: once the network to the
// database goes silent, the leader steps down, saying its session is
// unconfirmed, before the database frees the lock for a waiting standby.
func TestSilenceEndsTheTermBeforeTheLockIsFreed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := proxiedLeader(ctx, t)
	dsn, obs, p, fake, term := l.dsn, l.obs, l.p, l.fake, l.term
	last := lastQuery(ctx, t, obs)
	fake.Advance(confirmInterval)
	awaitCheck(ctx, t, obs, term, last, "the first check")

	b, err := New(Config{DSN: dsn, Name: "b", Interval: confirmInterval, SessionTimeout: confirmSession})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, b)
	waitForLock(ctx, t, obs, "b")

	p.silence()
	fake.Advance(confirmInterval)
	var ended time.Time
	select {
	case <-term.Done():
		ended = time.Now()
	case r := <-won:
		t.Fatalf("standby b won the lock (%v) while a's term lasted: two leaders", r.err)
	case <-time.After(30 * time.Second): // a test timeout, not a measure
		t.Fatal("the term did not end within 30s of the database going silent")
	}
	if err := term.Err(); err == nil || !strings.Contains(err.Error(), "leader session unconfirmed") {
		t.Fatalf("term.Err() = got %v, want leader session unconfirmed", err)
	}
	bterm := await(t, won, 30*time.Second, "a's session timed out in the database")
	defer bterm.Resign()
	t.Logf("a stepped down %v before b won the lock", time.Since(ended).Round(time.Millisecond))
}

// proxied is elector a's term through a proxy to a database of its own,
// its checks paced by fake.
type proxied struct {
	dsn  string // the database's own address, not the proxy's
	obs  *pgx.Conn
	p    *proxy
	fake *clock.Fake
	term *Term
}

// proxiedLeader makes elector a the leader through a proxy and waits for
// its check ticker; the term is resigned when the test ends.
func proxiedLeader(ctx context.Context, t *testing.T) proxied {
	t.Helper()
	l := proxied{dsn: database(t), fake: clock.NewFake(time.Unix(0, 0))}
	l.obs = observer(ctx, t, l.dsn)
	l.p = newProxy(t, l.dsn)
	e, err := New(Config{DSN: l.p.dsn, Name: "a", Interval: confirmInterval, SessionTimeout: confirmSession, Clock: l.fake})
	if err != nil {
		t.Fatal(err)
	}
	if l.term, err = e.Campaign(ctx); err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
	t.Cleanup(l.term.Resign)
	if err := l.fake.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	return l
}

// lastQuery returns when elector a's session last started a query.
func lastQuery(ctx context.Context, t *testing.T, obs *pgx.Conn) time.Time {
	t.Helper()
	s := sessions(ctx, t, obs, "a")
	if len(s) != 1 || s[0].queryStart == nil {
		t.Fatalf("sessions of a = got %+v, want one that has run a query", s)
	}
	return *s[0].queryStart
}

// awaitCheck waits for elector a's session to start a query after `after`
// (its next check) and returns when it started; it fails the test at once
// if the term ends first.
func awaitCheck(ctx context.Context, t *testing.T, obs *pgx.Conn, term *Term, after time.Time, what string) time.Time {
	t.Helper()
	var got time.Time
	testenv.Eventually(t, 30*time.Second, what+" to reach the database", func() bool {
		if err := term.Err(); err != nil {
			t.Fatalf("the term ended before %s reached the database: %v", what, err)
		}
		s := sessions(ctx, t, obs, "a")
		if len(s) == 1 && s[0].queryStart != nil && s[0].queryStart.After(after) {
			got = *s[0].queryStart
			return true
		}
		return false
	})
	return got
}

// proxy forwards TCP connections to the database, delaying the database's
// answers by a set time (delay) or, once silenced, forwarding nothing
// either way and closing nothing, as a partition does.
type proxy struct {
	dsn string

	mu       sync.Mutex
	lag      time.Duration
	isSilent bool
}

func newProxy(t *testing.T, dsn string) *proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	p := &proxy{dsn: u.String()}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, s)
			cmu.Unlock()
			wg.Add(2)
			var sentLag atomic.Int64 // the lag in force when the client last sent
			go func() { defer wg.Done(); p.pipe(s, c, false, &sentLag) }()
			go func() { defer wg.Done(); p.pipe(c, s, true, &sentLag) }()
		}
	}()
	return p
}

// delay makes the proxy hold each of the database's answers for d.
func (p *proxy) delay(d time.Duration) {
	p.mu.Lock()
	p.lag = d
	p.mu.Unlock()
}

// silence makes the proxy drop everything from now on, and keep both ends
// of every connection open.
func (p *proxy) silence() {
	p.mu.Lock()
	p.isSilent = true
	p.mu.Unlock()
}

func (p *proxy) state() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag, p.isSilent
}

// pipe copies from src to dst; answers (from the database) are delayed by
// the lag in force when the client last sent (sentLag), so that a test may
// lift the delay as soon as it sees the query reach the database and still
// have that query's answer delayed. A silenced proxy drops what it reads
// and does not pass a close on.
func (p *proxy) pipe(dst io.WriteCloser, src io.Reader, answers bool, sentLag *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		lag, silent := p.state()
		if answers {
			lag = time.Duration(sentLag.Load())
		} else {
			sentLag.Store(int64(lag))
		}
		if err != nil {
			if !silent {
				dst.Close()
			}
			return
		}
		if silent {
			continue
		}
		if answers && lag > 0 {
			time.Sleep(lag) // the injected fault: a slow network or database
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}
