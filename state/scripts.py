"""The engine's Lua scripts, its only Redis work on a model step (issue 39): a turn's opening (which starts a
new run in the same call) and a commit per step; and a front end's mark that it showed a run. Every command in the
first two runs on every step or turn, so a write touches only what changes; what each command buys is in
docs/benchmarks.md ("Where a run's Redis commands go").

A shard's runs index (``Keys.index(shard, "runs")``) holds a running run scored by its last write, and a run
that stopped running (paused, finished, stalled) and that no front end has shown yet scored by ``UNSHOWN_BAND`` +
when it stopped: moving between the two is one ZADD. A member ``~`` scored -1 (:data:`SENTINEL`) keeps the key
from vanishing when its last run leaves, so that a ZADD that adds two members is the one that made the key and
sets its TTL; otherwise each process renews it once an hour (``state.keys.Renewals``).
"""

from __future__ import annotations

UNSHOWN_BAND = 10_000_000_000.0
"""Scores from here on are runs nobody showed (seconds since the epoch stay below it until the year 2286)."""
SENTINEL = "~"

# Shared by both scripts. join: a run joins the runs index (or moves within it); the ZADD that makes the key (two
# members added) sets its TTL. count: the hour's counters; the hour's first count of something (the hash itself may
# be new) sets the hash's TTL.
_SHARED = """
local function join(index, score, run_id, ttl, renew)
  if redis.call('ZADD', index, -1, '~', score, run_id) == 2 or renew then redis.call('EXPIRE', index, ttl) end
end
local function count(stats, counters, ttl)
  local fresh = false
  for name, n in pairs(counters) do
    if redis.call('HINCRBY', stats, name, n) == n then fresh = true end
  end
  if fresh then redis.call('EXPIRE', stats, ttl) end
end
"""

# The commit. ARGV[1] is a named header (JSON), ARGV[2] the run record (with its trace) behind this commit's id, then
# the new transcript messages, then one ticket per new token. KEYS: transcript, run, thread's run, paused index,
# runs index, stats bucket, audit stream, cancel flag, thread lease, then one key per new token. A commit whose id
# the run record already carries (a retry after its reply was lost: only a retry looks) does nothing. A writer that
# no longer holds the thread's lease (another worker took it after it lapsed) is refused. A run that pauses drops
# any cancel request: nobody is left to act on it, and it must not stop the run's next turn. The turn's last write
# lets go of the thread's lease, if it still holds it (GET at the start, DEL at the end: not one GETDEL, whose
# put-back of another owner's lease would give it our length, and which an error midway would leave released).
COMMIT = _SHARED + """
local h = cjson.decode(ARGV[1])
if h.check and redis.call('GETRANGE', KEYS[2], 0, #h.commit_id - 1) == h.commit_id then  -- a retry, applied already
  return redis.call('LLEN', KEYS[1])
end
local holder = false
if h.owner or h.release then holder = redis.call('GET', KEYS[9]) end  -- read once: the check and the release
if h.owner and holder and holder ~= h.owner then return redis.error_reply('OPSPILOT_LEASE_LOST ' .. holder) end
local i = 3
local length = -1
if h.messages > 0 then
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, i + h.messages - 1))
  if length == h.messages then redis.call('EXPIRE', KEYS[1], h.ttl) end  -- new; turns' openings renew it
  i = i + h.messages
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', h.ttl)
if h.status_changed then
  -- the thread's run is named when the run is made (it lives minutes; the name a week); the paused index's TTL is
  -- renewed when a run joins it (leaving needs none), and a run leaves it only if it was in it (or if not known)
  if h.was == '' or not h.was then redis.call('SET', KEYS[3], h.run_id, 'EX', h.ttl) end
  if h.paused_score then
    redis.call('ZADD', KEYS[4], h.paused_score, h.run_id)
    redis.call('EXPIRE', KEYS[4], h.ttl)
  elseif not h.was or h.was == 'paused' then redis.call('ZREM', KEYS[4], h.run_id) end
  join(KEYS[5], h.index_score, h.run_id, h.ttl, h.renew_index)
end
count(KEYS[6], h.counters, h.stats_ttl)
for _, entry in ipairs(h.audit) do
  local fields = {}
  for name, value in pairs(entry) do
    fields[#fields + 1] = name
    fields[#fields + 1] = tostring(value)
  end
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', h.audit_max, '*', unpack(fields))
  redis.call('EXPIRE', KEYS[7], h.audit_ttl)
end
-- a cancel request must not stop a paused run's next turn (a finished run has none)
if h.status_changed and h.status ~= 'running' and h.status ~= 'finished' then redis.call('DEL', KEYS[8]) end
for j = 0, h.tickets - 1 do
  redis.call('SET', KEYS[10 + j], ARGV[i + j], 'EX', h.ticket_ttl)
end
if h.release and holder == h.release then redis.call('DEL', KEYS[9]) end  -- last: after every write
return length
"""

# A turn opens: take the thread's lease (a retry after a lost reply finds its own owner there), then read the run
# (ARGV[5], or the thread's latest; the trace list of one written before its trace moved into its record) and the
# transcript from ARGV[3] on (all of it if it is shorter now: expired and recreated). KEYS: lease, thread's run,
# transcript, and for a start the runs index and the stats bucket. The run's keys are named from ARGV[4] (the
# thread's run key prefix) when its id carries the thread's shard (ARGV[6]): same hash slot. ARGV[7]: the thread's
# TTL, renewed when ARGV[8] is "1".
#
# A start (ARGV[9], a JSON header; ARGV[10] the new run's record, ARGV[11] its question) makes the new run in the
# same call when the thread has none under way (none, or its latest finished) and the transcript read here does not
# hold the question's request id (the caller looked in what it has cached): the question is appended, the run
# saved, named the thread's run and indexed as running. Until then nothing but the lease was written, so a run
# that finds the thread busy is started afresh by the caller. The usual turn skips every read: when the caller
# saw the thread's latest run finish at the transcript length it has (the header's ``finished``: that run's id),
# the question is pushed first, and if it lands right behind that length nobody wrote to the thread since (every
# run that is made pushes its question), so that run is still the thread's latest and the new one is made;
# otherwise the question is popped again and the turn goes the long way. So is a thread that names no run when the
# caller has none of it cached (a new thread, most likely): a question that makes the list needs nothing read.
# Returns {0, holder} when busy, else {1, run id, run record, trace, transcript length, first index, rows, started}
# with started 1 (made now: the question follows the rows), 2 (made by this same call before its reply was lost, and
# not written since: the rows hold it) or 0. A run under way is told from a finished one by how its record starts,
# never by text anywhere in it (a tool's arguments may say "status":"finished" too); a record written before
# finished ones started that way reads as under way, and the engine decides.
OPEN_TURN = _SHARED + """
local FINISHED = '^%x*{"status":"finished"'  -- how a finished run's record starts (after its commit id)
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then return {0, holder or ''} end
end
local h = ARGV[9] and cjson.decode(ARGV[9])
local function make()  -- the new run (its question pushed): record, the thread's run, the index, the count
  redis.call('SET', ARGV[4] .. h.run_id, ARGV[10], 'EX', ARGV[7])
  redis.call('SET', KEYS[2], h.run_id, 'EX', ARGV[7])
  join(KEYS[4], h.index_score, h.run_id, ARGV[7], h.renew_index)
  count(KEYS[5], h.counters, h.stats_ttl)
end
if h and h.finished and ARGV[5] == '' then
  local known = tonumber(ARGV[3])
  if redis.call('RPUSH', KEYS[3], ARGV[11]) == known + 1 then
    if ARGV[8] == '1' then redis.call('EXPIRE', KEYS[3], ARGV[7]) end  -- the thread's TTL: its last turn
    make()
    return {1, h.finished, '', {}, known, known, {}, 1}
  end
  redis.call('RPOP', KEYS[3])  -- ours: the script runs alone
end
local run_id = ARGV[5]
if run_id == '' then run_id = redis.call('GET', KEYS[2]) or '' end
local raw, trace, known = '', {}, run_id == ''
if run_id ~= '' and string.sub(run_id, 1, #ARGV[6]) == ARGV[6] then
  known = true
  raw = redis.call('GET', ARGV[4] .. run_id) or ''
  local inline = string.find(raw, '"rows":', 1, true) or string.find(raw, FINISHED)
  if raw ~= '' and not inline then trace = redis.call('LRANGE', ARGV[4] .. run_id .. ':trace', 0, -1) end
end
-- from the last message the caller has: nothing comes back only if the list is shorter (expired and recreated)
local start, rows = tonumber(ARGV[3]), {}
if h and run_id == '' and start == 0 then  -- no run named, nothing cached: most likely a new thread
  if redis.call('RPUSH', KEYS[3], ARGV[11]) == 1 then  -- it was: no message to read, none to look through
    redis.call('EXPIRE', KEYS[3], ARGV[7])
    make()
    return {1, '', '', {}, 0, 0, {}, 1}
  end
  redis.call('RPOP', KEYS[3])  -- a thread whose run's name expired: read and decide as below
end
if start > 0 then
  rows = redis.call('LRANGE', KEYS[3], start - 1, -1)
  if #rows > 0 then table.remove(rows, 1) else start = 0 end
end
if start == 0 then rows = redis.call('LRANGE', KEYS[3], 0, -1) end
local length = start + #rows
if length > 0 and ARGV[8] == '1' then redis.call('EXPIRE', KEYS[3], ARGV[7]) end  -- the thread's TTL: its last turn
local started = 0
if h then
  if run_id == h.run_id then  -- made by this same call, if nobody wrote to it since (its commit id is ours)
    if string.sub(raw, 1, #h.commit_id) == h.commit_id then started = 2 end
  elseif known and (raw == '' or string.find(raw, FINISHED)) then
    started = 1
    if h.needle then
      for _, row in ipairs(rows) do
        if string.find(row, h.needle, 1, true) then started = 0 break end
      end
    end
  end
  if started == 1 then
    if redis.call('RPUSH', KEYS[3], ARGV[11]) == 1 then redis.call('EXPIRE', KEYS[3], ARGV[7]) end
    make()
  end
end
return {1, run_id, raw, trace, length, start, rows, started}
"""

# A front end showed a run: it leaves the runs index if it is still there as unshown (a run moving again is not
# touched). KEYS: the runs index. ARGV: run id, UNSHOWN_BAND.
SHOWN = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) >= tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1
"""
