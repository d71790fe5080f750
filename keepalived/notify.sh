#!/bin/sh
# notify.sh LOGFILE METRICSFILE TYPE NAME STATE [PRIORITY]
#
# Keepalived notify script of repool's LB hosts. At every VRRP transition it
#
# - appends one line to LOGFILE, e.g.
#
#     2026-01-02T15:04:05.123Z INSTANCE repool MASTER priority=250
#
# - rewrites METRICSFILE (atomically: a temporary file renamed over it) with
#   the state as Prometheus metrics, which the node exporter's textfile
#   collector serves (Debian's prometheus-node-exporter reads
#   /var/lib/prometheus/node-exporter/*.prom):
#
#     repool_keepalived_master{vrrp_instance="repool"} 1
#     repool_keepalived_state{vrrp_instance="repool",state="MASTER"} 1
#     repool_keepalived_state{vrrp_instance="repool",state="BACKUP"} 0
#     ... (FAULT, STOP: 0)
#     repool_keepalived_transition_timestamp_seconds{vrrp_instance="repool"} 1767366305
#
# keepalived.conf names it with both files as its first arguments
# (notify "/etc/keepalived/notify.sh /var/log/keepalived-repool-lb1.log
# /var/lib/prometheus/node-exporter/keepalived-repool-lb1.prom"); keepalived
# appends TYPE (INSTANCE or GROUP), NAME, STATE (MASTER, BACKUP, FAULT, STOP)
# and the priority. Install it root-owned and not writable by others:
# keepalived runs it with enable_script_security.
set -eu

if [ "$#" -lt 5 ]; then
	echo "usage: $0 LOGFILE METRICSFILE TYPE NAME STATE [PRIORITY]" >&2
	exit 2
fi
log=$1 metrics=$2 type=$3 name=$4 state=$5 prio=${6:-}

mkdir -p "$(dirname "$log")"
# One printf per line: appends of a short line are atomic, so both LB
# hosts may share a log file in namespace tests.
printf '%s %s %s %s priority=%s\n' \
	"$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$type" "$name" "$state" "$prio" >>"$log"

# Only an instance's state is a metric (a GROUP's follows its instances').
[ "$type" = INSTANCE ] || exit 0
mkdir -p "$(dirname "$metrics")"
tmp="$metrics.$$.tmp"
{
	echo '# HELP repool_keepalived_master 1 while this LB host holds the VIP (VRRP state MASTER).'
	echo '# TYPE repool_keepalived_master gauge'
	master=0
	[ "$state" = MASTER ] && master=1
	printf 'repool_keepalived_master{vrrp_instance="%s"} %s\n' "$name" "$master"
	echo '# HELP repool_keepalived_state The VRRP state of this LB host: 1 for the state it is in.'
	echo '# TYPE repool_keepalived_state gauge'
	for s in MASTER BACKUP FAULT STOP; do
		v=0
		[ "$s" = "$state" ] && v=1
		printf 'repool_keepalived_state{vrrp_instance="%s",state="%s"} %s\n' "$name" "$s" "$v"
	done
	echo '# HELP repool_keepalived_transition_timestamp_seconds When this LB host last changed VRRP state.'
	echo '# TYPE repool_keepalived_transition_timestamp_seconds gauge'
	printf 'repool_keepalived_transition_timestamp_seconds{vrrp_instance="%s"} %s\n' "$name" "$(date -u +%s)"
} >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$metrics"
