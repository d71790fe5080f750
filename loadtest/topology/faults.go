package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/repool/repool/internal/clock"
)

// StopServers stops every running server of the provider gracefully
// (SIGTERM) and waits for them to exit.
func (t *Topology) StopServers(provider string) error {
	c, err := t.cluster(provider)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, n := range c.servers {
		if p := t.procOf(n); p != nil && p.running() {
			wg.Go(func() { p.stop(syscall.SIGTERM, 5*time.Second) })
		}
	}
	wg.Wait()
	t.cfg.Event(fmt.Sprintf("%s: every server stopped (SIGTERM)", provider))
	return nil
}

// StartServers starts every server of the provider that is not running.
func (t *Topology) StartServers(ctx context.Context, provider string) error {
	c, err := t.cluster(provider)
	if err != nil {
		return err
	}
	for _, n := range c.servers {
		if p := t.procOf(n); p == nil || !p.running() {
			if _, err := t.startNode(ctx, n); err != nil {
				return err
			}
			t.cfg.Event(fmt.Sprintf("%s: started again", n.name))
		}
	}
	return nil
}

// KillActive kills (SIGKILL) the provider's active server and returns its
// name. It looks for it for up to killActiveWait: on a loaded machine a
// server may be slow to answer its readiness check, or the provider may be
// between two leaders.
func (t *Topology) KillActive(ctx context.Context, provider string) (string, error) {
	c, err := t.cluster(provider)
	if err != nil {
		return "", err
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := t.cfg.Clock.Now().Add(killActiveWait)
	for {
		for _, n := range c.servers {
			p := t.procOf(n)
			if p == nil || !p.running() {
				continue
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.http+"/readyz/active", nil)
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.kill()
				t.cfg.Event(fmt.Sprintf("%s: active server killed (SIGKILL)", n.name))
				return n.name, nil
			}
		}
		if t.cfg.Clock.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("provider %s has no active server to kill (looked for %v)", provider, killActiveWait)
		}
		_ = clock.Sleep(ctx, t.cfg.Clock, 100*time.Millisecond) // a cancelled ctx ends the loop above
	}
}

// killActiveWait is how long KillActive looks for the active server.
const killActiveWait = 5 * time.Second

// StartServer starts the named server of the provider if it is not running.
func (t *Topology) StartServer(ctx context.Context, provider, name string) error {
	c, err := t.cluster(provider)
	if err != nil {
		return err
	}
	for _, n := range c.servers {
		if n.name == name {
			if p := t.procOf(n); p != nil && p.running() {
				return nil
			}
			if _, err := t.startNode(ctx, n); err != nil {
				return err
			}
			t.cfg.Event(fmt.Sprintf("%s: started again", n.name))
			return nil
		}
	}
	return fmt.Errorf("provider %s has no server %s", provider, name)
}

// Toxic is a toxiproxy toxic as its API takes it.
type Toxic struct {
	Type string `json:"type"`
	// Stream is upstream (client to server) or downstream. Default
	// downstream.
	Stream string `json:"stream,omitempty"`
	// Toxicity is the probability that a connection gets the toxic.
	// Default 1.
	Toxicity   float32        `json:"toxicity,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// AddToxics adds the toxics to every toxiproxy of the provider (its VIP
// and each server's) — existing connections included — and returns the
// function that removes them.
func (t *Topology) AddToxics(provider string, toxics ...Toxic) (remove func(), err error) {
	c, err := t.cluster(provider)
	if err != nil {
		return nil, err
	}
	type added struct {
		px   *toxiproxy.Proxy
		name string
	}
	var done []added
	remove = func() {
		for i := len(done) - 1; i >= 0; i-- {
			_ = done[i].px.Toxics.RemoveToxic(context.Background(), done[i].name)
		}
	}
	for _, px := range append([]*toxiproxy.Proxy{c.vip}, c.edges...) {
		for _, tx := range toxics {
			t.mu.Lock()
			t.toxics++
			name := fmt.Sprintf("%s-%d", tx.Type, t.toxics)
			t.mu.Unlock()
			body := map[string]any{"name": name, "type": tx.Type, "stream": tx.Stream, "toxicity": tx.Toxicity, "attributes": tx.Attributes}
			if tx.Stream == "" {
				body["stream"] = "downstream"
			}
			if tx.Toxicity == 0 {
				body["toxicity"] = 1.0
			}
			raw, err := json.Marshal(body)
			if err != nil {
				remove()
				return nil, err
			}
			if _, err := px.Toxics.AddToxicJson(bytes.NewReader(raw)); err != nil {
				remove()
				return nil, fmt.Errorf("toxiproxy %s: adding %s: %w", px.Name, tx.Type, err)
			}
			done = append(done, added{px, name})
		}
	}
	return remove, nil
}

// SetBrownout sets the share of the provider's calls that its brownout
// proxies answer UNAVAILABLE. The provider must have been started with
// Config.Brownout.
func (t *Topology) SetBrownout(provider string, share float64) error {
	c, err := t.cluster(provider)
	if err != nil {
		return err
	}
	if len(c.brownouts) == 0 {
		return fmt.Errorf("provider %s has no brownout proxy (Config.Brownout)", provider)
	}
	for _, b := range c.brownouts {
		b.setShare(share)
	}
	return nil
}

func (t *Topology) cluster(provider string) (*cluster, error) {
	c, ok := t.clusters[provider]
	if !ok {
		return nil, fmt.Errorf("no provider %q in the topology", provider)
	}
	return c, nil
}

func (t *Topology) procOf(n *node) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return n.proc
}
