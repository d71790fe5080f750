package haproxy

import (
	"fmt"
	"strings"

	"github.com/haproxytech/client-native/v5/configuration"
	"github.com/haproxytech/client-native/v5/models"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// clusterDownRule is the backend rule that answers a call at once, HTTP
// 503 with repoolv1.ClusterDownText, when none of servers is alive: a
// server is alive while HAProxy does not see it DOWN (srv_is_up: UP, the
// active server, or NOLB, a standby). During a handover a standby is
// alive, so the call meets HAProxy's own answer (no server usable yet: a
// 503 without the text, which clients retry) and then the new active
// server; with every server DOWN (stopped, crashed, cut off or not ready)
// there is nothing to wait for, and a client that knows the text fails
// the call instead of retrying it.
//
// HAProxy cannot answer a gRPC Trailers-Only response (it drops a
// content-type without a body), so the answer is plain HTTP: gRPC clients
// read a 503 as UNAVAILABLE, with the body in the message.
func clusterDownRule(backend string, servers []string) *models.HTTPRequestRule {
	var cond strings.Builder
	for i, s := range servers {
		if i > 0 {
			cond.WriteByte(' ')
		}
		fmt.Fprintf(&cond, "!{ srv_is_up(%s/%s) }", backend, s)
	}
	return &models.HTTPRequestRule{
		Type: "return", ReturnStatusCode: ptr(int64(503)), ReturnContentType: ptr("text/plain"),
		ReturnContentFormat: "string", ReturnContent: `"` + repoolv1.ClusterDownText + `"`,
		Cond: "if", CondTest: cond.String(),
	}
}

// addClusterDownRule writes clusterDownRule into backend, first.
func addClusterDownRule(conf configuration.Configuration, tx, backend string, servers []string) error {
	if len(servers) == 0 {
		return nil
	}
	rule := clusterDownRule(backend, servers)
	rule.Index = ptr(int64(0))
	if err := conf.CreateHTTPRequestRule("backend", backend, rule, tx, 0); err != nil {
		return fmt.Errorf("backend %s http-request return: %w", backend, err)
	}
	return nil
}
