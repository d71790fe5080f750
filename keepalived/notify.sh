#!/bin/sh
# notify.sh LOGFILE TYPE NAME STATE [PRIORITY]
#
# Keepalived notify script of repool's LB hosts: appends one line per VRRP
# transition to LOGFILE, e.g.
#
#   2026-01-02T15:04:05.123Z INSTANCE repool MASTER priority=250
#
# keepalived.conf names it with the log file as its first argument
# (notify "/etc/keepalived/notify.sh /var/log/keepalived-repool-lb1.log");
# keepalived appends TYPE (INSTANCE or GROUP), NAME, STATE (MASTER, BACKUP,
# FAULT, STOP) and the priority. Install it root-owned and not writable by
# others: keepalived runs it with enable_script_security.
set -eu

if [ "$#" -lt 4 ]; then
	echo "usage: $0 LOGFILE TYPE NAME STATE [PRIORITY]" >&2
	exit 2
fi
log=$1 type=$2 name=$3 state=$4 prio=${5:-}

mkdir -p "$(dirname "$log")"
# One printf per line: appends of a short line are atomic, so both LB
# hosts may share a log file in namespace tests.
printf '%s %s %s %s priority=%s\n' \
	"$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$type" "$name" "$state" "$prio" >>"$log"
