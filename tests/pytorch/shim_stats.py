"""The shim's TERN_STATS=2 tables (guest-shim/stats.c), read back from a shim
log (TERN_LOG_FILE), for tests/pytorch/compare.

Each process that loaded the shim logs, at its exit, a header row ("entry
point calls round-trips deferred local"), one row per entry point it
called, a "total" row and a "round trips: ..." line. Lines are whole (one
write each) but the processes of one run may interleave theirs, so a table
is gathered by the pid in the log prefix ("HH:MM:SS.mmm shim[PID] warn:
shim: ..."). A table is taken only when it is complete and its total row is
the sum of its rows; anything else is reported as a problem, not counted.
"""
import collections
import re

_LINE = re.compile(r'\[(\d+)\] (?:error|warn|info|debug): shim: (.*?)\s*$')
_HEADER = re.compile(r'^entry point\s+calls\s+round-trips\s+deferred\s+local$')
_ROW = re.compile(r'^(\S(?:.*\S)?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$')
FIELDS = ('calls', 'round_trips', 'deferred', 'local')
# cudart looks up every entry point once (stats.c says the same).
LOOKUP = 'cuGetProcAddress'


class Table:
    """One process's table: rows[name] = {calls, round_trips, deferred, local}."""

    def __init__(self, pid):
        self.pid = pid
        self.rows = {}
        self.total = None

    def sum(self, field, skip_lookups=False):
        return sum(r[field] for name, r in self.rows.items()
                   if not (skip_lookups and name.startswith(LOOKUP)))


def parse(text):
    """The complete tables in a shim log's text, and the problems met: a
    list of Table, a list of strings."""
    open_tables, done, problems = {}, [], []
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        pid, body = int(m.group(1)), m.group(2)
        if _HEADER.match(body):
            if pid in open_tables:
                problems.append('pid %d: a table began before the previous one ended' % pid)
            open_tables[pid] = Table(pid)
            continue
        table = open_tables.get(pid)
        if table is None:
            continue
        r = _ROW.match(body)
        if not r:
            # Another line of that process (a warning at exit): not a row.
            continue
        values = dict(zip(FIELDS, (int(v) for v in r.groups()[1:])))
        name = r.group(1)
        if name == 'total':
            table.total = values
            del open_tables[pid]
            bad = [f for f in FIELDS if table.sum(f) != values[f]]
            if bad:
                problems.append('pid %d: the total row does not add up (%s)' % (pid, ', '.join(bad)))
            else:
                done.append(table)
        elif name in table.rows:
            problems.append('pid %d: %s twice in one table' % (pid, name))
        else:
            table.rows[name] = values
    for pid in open_tables:
        problems.append('pid %d: a table without its total row (the process died, or the log was cut)' % pid)
    return done, problems


class Summary:
    """Several processes' tables added up."""

    def __init__(self, tables):
        self.processes = len(tables)
        self.by_entry = collections.Counter()
        self.calls = self.round_trips = self.lookup_calls = self.lookup_round_trips = 0
        for t in tables:
            for name, r in t.rows.items():
                self.by_entry[name] += r['round_trips']
            self.calls += t.sum('calls')
            self.round_trips += t.sum('round_trips')
            self.lookup_calls += t.sum('calls') - t.sum('calls', skip_lookups=True)
            self.lookup_round_trips += t.sum('round_trips') - t.sum('round_trips', skip_lookups=True)

    def share(self, skip_lookups=False):
        """Round trips as a percentage of calls (None without calls)."""
        calls = self.calls - (self.lookup_calls if skip_lookups else 0)
        trips = self.round_trips - (self.lookup_round_trips if skip_lookups else 0)
        return 100.0 * trips / calls if calls else None

    def top(self, n=10):
        """The n entry points with the most round trips, most first (ties by name)."""
        ranked = sorted(((t, name) for name, t in self.by_entry.items() if t), key=lambda x: (-x[0], x[1]))
        return [(name, t) for t, name in ranked[:n]]
