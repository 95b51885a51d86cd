package redis

import (
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// A key's state is a hash: s (the epoch's start, Unix ms on the server's
// clock), c (the count), p (the previous window's count, sliding only),
// w (how long a reset state is kept, ms), and what leases hold
// (driver.Lease): l, the hits they counted ahead and have neither settled
// nor given back, which a reset keeps counted, and ls, the first start of
// the epochs resets have replaced since a window last closed, the oldest
// a give-back still applies to (s when absent). One hash: one key, one
// slot of a cluster. Every script reads the server's
// clock itself (TIME), so instances with skewed clocks agree.
//
// Lua numbers are doubles: every value a script computes is an integer
// below 2^53, and so exact, for every rule rate.New accepts (limits and
// bursts up to rate.MaxLimit = 2^40, windows up to rate.MaxWindow, 100
// years ≈ 2^41.5 ms), by these arguments:
//
//   - times are milliseconds (2^40.6 now);
//   - the sliding window's prev × (W − e) ≤ (limit − count − n) × W is
//     compared as exact 144-bit products, in 24-bit limbs (mul, le);
//   - GCRA's interval T (nanoseconds, rate's Window/Limit rounded up) is
//     split into whole milliseconds tq and the remainder tr < 10^6 ns, and
//     every instant start + count × T into milliseconds and a nanosecond
//     remainder (tat), so no product exceeds the milliseconds the epoch
//     has lasted, or burst × T ≤ rate.MaxWindow in milliseconds.
//
// A GCRA epoch is not re-anchored while it stays busy (rate's Advance
// moves a busy epoch's start on by whole intervals; its Room depends only
// on the TAT, which both leave alike), so its count grows by one per
// emission: exact while a key stays busy for fewer than 2^53 emissions.
const luaCommon = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(x) return string.format('%d', x) end
local B = 16777216
local function limbs(a)
  local a0 = a % B
  local a1 = math.floor(a / B) % B
  return a0, a1, math.floor(a / (B * B))
end
local function mul(a, b)
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local r = {a0*b0, a0*b1 + a1*b0, a0*b2 + a1*b1 + a2*b0, a1*b2 + a2*b1, a2*b2, 0}
  for i = 1, 5 do
    local carry = math.floor(r[i] / B)
    r[i] = r[i] - carry * B
    r[i+1] = r[i+1] + carry
  end
  return r
end
local function le(x, y)
  for i = 6, 1, -1 do
    if x[i] ~= y[i] then return x[i] < y[i] end
  end
  return true
end
local key = KEYS[1]
-- settle lowers the held hits l by n answered ones counted in the epoch
-- that started at ss, if that epoch is s or one resets replaced since ls,
-- and adds a adopted ones if ss is s; it reports whether l changed
local function settle(l, ls, s, n, ss, a)
  local changed = false
  if n > 0 and ss >= ls and ss <= s then l, changed = math.max(l - n, 0), true end
  if a > 0 and ss == s then l, changed = l + a, true end
  return l, changed
end
-- written, for an allowed hit of a fixed or sliding window whose epoch
-- went on (st: the key's HMGET of s, c, l, ls, p, w), writes only its
-- count c and its held hits l, if they changed, when the rest of the full
-- write (s, p, w, ls, and the expiry at the epoch's end, exp) would leave
-- the key as it is, and reports whether it did. Most hits of a busy key
-- are such: a full write's five other fields and its PEXPIREAT cost the
-- server, its AOF and its replicas for nothing. Otherwise (a reset, which
-- leaves the key expiring at 2w or w from its own start; another
-- algorithm's or window's state; a state without ls) the caller writes
-- the whole state, so a key never outlives or under-lives its window.
-- call and fmt are redis.call and int, or in luaBatch's view of a key
-- its kv and num. PEXPIRETIME (Redis 7.0) is asked with redis.pcall (kv
-- does too): an older server's error reply is not a number, and only
-- means the full write.
local function written(call, fmt, key, st, c, l, ls, p, w, exp)
  if ls == nil or tonumber(st[5]) ~= p or tonumber(st[6]) ~= w then return false end
  local e
  if call == redis.call then e = redis.pcall('PEXPIRETIME', key) else e = call('PEXPIRETIME', key) end
  if e ~= exp then return false end
  if (tonumber(st[3]) or 0) == l then
    call('HSET', key, 'c', fmt(c))
  else
    call('HSET', key, 'c', fmt(c), 'l', fmt(l))
  end
  return true
end
`

// luaFixed: ARGV n (0: peek), limit, wc (the window rounded up to ms),
// and a lease's held (of n), settled, its start and adopted (absent: 0).
// Returns
// {allowed, start, count, prev, now}.
const bodyFixed = `
local n, limit, w = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local held, settled, ss, adopted = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local now = now_ms()
local st = redis.call('HMGET', key, 's', 'c', 'l', 'ls', 'p', 'w')
local s, c, l, ls = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3]) or 0, tonumber(st[4])
local kept = s ~= nil and now - s < w
if not kept then s, c, l, ls = now, 0, 0, now end
local settledNow
l, settledNow = settle(l, ls or s, s, settled, ss, adopted)
if n == 0 or n > limit - c then
  if settledNow then redis.call('HSET', key, 'l', int(l), 'ls', int(ls or s)) end
  return {0, s, c, 0, now}
end
c = c + n
if kept and written(redis.call, int, key, st, c, l + held, ls, 0, w, s + w) then return {1, s, c, 0, now} end
redis.call('HSET', key, 's', int(s), 'c', int(c), 'p', '0', 'w', int(w), 'l', int(l + held), 'ls', int(ls or s))
redis.call('PEXPIREAT', key, int(s + w))
return {1, s, c, 0, now}
`

const luaFixed = luaCommon + bodyFixed

// luaSliding: ARGV n (0: peek), limit, w (the window, whole ms), and a
// lease's as luaFixed's.
const bodySliding = `
local n, limit, w = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local held, settled, ss, adopted = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local now = now_ms()
local st = redis.call('HMGET', key, 's', 'c', 'l', 'ls', 'p', 'w')
local s, c, p, l, ls = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[5]) or 0, tonumber(st[3]) or 0, tonumber(st[4])
local kept = false
if s == nil then
  s, c, p, l, ls = now, 0, 0, 0, now
else
  local e = now - s
  if e < w then kept = true
  elseif e < 2 * w then s, c, p, l, ls = s + w, 0, c, 0, s + w
  else s, c, p, l, ls = now, 0, 0, 0, now end
end
local settledNow
l, settledNow = settle(l, ls or s, s, settled, ss, adopted)
local function refuse()
  if settledNow then redis.call('HSET', key, 'l', int(l), 'ls', int(ls or s)) end
  return {0, s, c, p, now}
end
if n == 0 then return refuse() end
local left = limit - c - n
if left < 0 then return refuse() end
local e = math.min(math.max(now - s, 0), w)
if p > 0 and not le(mul(p, w - e), mul(left, w)) then return refuse() end
c = c + n
if kept and written(redis.call, int, key, st, c, l + held, ls, p, w, s + 2 * w) then return {1, s, c, p, now} end
redis.call('HSET', key, 's', int(s), 'c', int(c), 'p', int(p), 'w', int(w), 'l', int(l + held), 'ls', int(ls or s))
redis.call('PEXPIREAT', key, int(s + 2 * w))
return {1, s, c, p, now}
`

const luaSliding = luaCommon + bodySliding

// luaGCRA: ARGV n (0: peek), burst, tq and tr (the interval: tq ms and
// tr ns, tr < 10^6), w (the window rounded up to ms, a reset's life).
const bodyGCRA = `
local n, burst, tq, tr, w = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local M = 1000000
-- start + k intervals, as whole ms and a remainder in ns
local function at(start, k)
  local kh = math.floor(k / M)
  local x = (k - kh * M) * tr
  local xm = math.floor(x / M)
  return start + k * tq + kh * tr + xm, x - xm * M
end
local now = now_ms()
local st = redis.call('HMGET', key, 's', 'c')
local s, c = tonumber(st[1]), tonumber(st[2]) or 0
if s ~= nil then
  local tm, tn = at(s, c)
  if tm < now or (tm == now and tn == 0) then s = nil end
end
if s == nil then s, c = now, 0 end
if n == 0 then return {0, s, c, 0, now} end
local m = burst - n
if m < 0 then return {0, s, c, 0, now} end
-- fits while TAT - now <= m intervals
local tm, tn = at(s, c)
local lm, ln = at(now, m)
if tm > lm or (tm == lm and tn > ln) then return {0, s, c, 0, now} end
c = c + n
tm, tn = at(s, c)
if tn > 0 then tm = tm + 1 end
redis.call('HSET', key, 's', int(s), 'c', int(c), 'p', '0', 'w', int(w))
redis.call('PEXPIREAT', key, int(tm))
return {1, s, c, 0, now}
`

const luaGCRA = luaCommon + bodyGCRA

// luaReset starts a live state over: start max(now, start + 1 ms), so
// that a reset window never starts where the old one did (a late
// take-back finds its epoch by its start), prev 0, and count what leases
// hold (l): their holders may answer those hits without asking, so they
// stay counted and held, and ls is kept, so that a give-back from before
// the reset still applies. Without held hits, or once the old window has
// closed (no lease answers past it), count 0. Kept for w, or 2w while it
// counts held hits, so that a sliding window's weigh on the next (a
// fixed window's script ignores the longer life). A key without a live
// state is left alone. Returns 1 if it reset one.
const luaReset = luaCommon + `
local st = redis.call('HMGET', key, 's', 'w', 'c', 'l', 'ls')
if not st[1] then return 0 end
local now = now_ms()
local old = tonumber(st[1])
local s = math.max(now, old + 1)
local w = math.max(tonumber(st[2]) or 0, 1)
local held = math.min(tonumber(st[3]) or 0, tonumber(st[4]) or 0)
if now - old >= w then held = 0 end
if held > 0 then
  redis.call('HSET', key, 's', int(s), 'c', int(held), 'p', '0', 'l', int(held), 'ls', int(tonumber(st[5]) or old))
  redis.call('PEXPIREAT', key, int(s + 2 * w))
else
  redis.call('HSET', key, 's', int(s), 'c', '0', 'p', '0', 'l', '0', 'ls', int(s))
  redis.call('PEXPIREAT', key, int(s + w))
end
return 1
`

// luaTakeBack lowers a live state's count by ARGV n, never below 0, if its
// start is ARGV start. With ARGV lease 1 it is a lease's give-back: n
// held hits and ARGV settled answered ones, counted in the epoch start or
// one resets have replaced since, come out of what leases hold (l) too.
// Returns 1 if it changed the state.
const luaTakeBack = luaCommon + `
local start, n, lease, settled = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) or 0, tonumber(ARGV[4]) or 0
local st = redis.call('HMGET', key, 's', 'c', 'l', 'ls')
if not st[1] then return 0 end
local s, c = tonumber(st[1]), tonumber(st[2]) or 0
if lease == 1 then
  if start < (tonumber(st[4]) or s) or start > s then return 0 end
  redis.call('HSET', key, 'c', int(math.max(c - n, 0)), 'l', int(math.max((tonumber(st[3]) or 0) - n - settled, 0)))
  return 1
end
if s ~= start then return 0 end
redis.call('HSET', key, 'c', int(math.max(c - n, 0)))
return 1
`

// luaClaim records KEYS[1]'s policy for instance ARGV id as ARGV policy,
// alive for ARGV ttl ms on the server's clock, unless a live instance
// holds another one. Each field of the hash is an instance: "<deadline
// ms> <policy>". Dead fields are dropped. Returns {1, a dead field's other
// policy or ""} or {0, the live other policy}.
const luaClaim = luaCommon + `
local id, mine, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local all = redis.call('HGETALL', key)
local last = now + ttl
local was = ''
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  local d, pol = tonumber(string.sub(v, 1, (sp or 1) - 1)) or 0, string.sub(v, (sp or #v) + 1)
  if f == id then
  elseif d <= now then
    redis.call('HDEL', key, f)
    if pol ~= mine then was = pol end
  elseif pol ~= mine then
    return {0, pol}
  elseif d > last then
    last = d
  end
end
redis.call('HSET', key, id, int(now + ttl) .. ' ' .. mine)
redis.call('PEXPIREAT', key, int(last))
return {1, was}
`

// luaBatch runs several hits and peeks, of any keys on this node, in one
// call: KEYS are their keys in arrival order, and ARGV holds for each
// its algorithm (f, s or g), how many arguments follow, and the
// arguments its own script takes. Each runs the body of its own script,
// as a function of its key, the batch's now (one TIME: the script is
// atomic, so every hit is decided as though all arrived within that
// millisecond, in order) and its arguments, under pcall, so that a hit
// whose command fails (a foreign value at its key) gets its own error and
// the others stand, as they do as separate calls of a pipeline.
//
// The hits of a key that several of the batch's hits share (one busy
// client; ARGV names their algorithm in capitals: F, S, G) send their
// HMGET, HSET and PEXPIREAT to a view of its hash (kv): the key is read
// once, its hits read and write the view in order, and what they wrote is
// written back once at the end, one HSET of the fields they set and their
// last expiry. So its state after the batch, and every verdict, are a
// serial run's, at three commands for the key, not three per hit. A
// write-back that fails (an out-of-memory server) fails every hit that
// read the key, answered or not. A key with one hit in the batch goes to
// the server directly: the view would only add to its cost.
//
// Returns five values per hit: its script's reply, or its error followed
// by four zeros.
var luaBatch = luaCommon + `
local batch_now = now_ms()
local view, order, cur = {}, {}, 0
local fields = {'s', 'c', 'p', 'w', 'l', 'ls'}
-- the bodies' int(x) for the view: x is formatted once, at the write-back
local function num(x) return x end
local function kv(cmd, k, ...)
  local e = view[k]
  if cmd == 'HMGET' then
    if not e then
      local v = redis.call('HMGET', k, 's', 'c', 'p', 'w', 'l', 'ls')
      e = {h = {}, set = {}, hits = {}}
      for i = 1, 6 do e.h[fields[i]] = v[i] end
      view[k] = e
      order[#order + 1] = k
    end
    e.hits[#e.hits + 1] = cur
    local out = {}
    for i = 1, select('#', ...) do
      local v = e.h[(select(i, ...))]
      if v == nil then error({err = 'ERR batch script: a hash field outside its view'}) end
      out[i] = v
    end
    return out
  end
  if not e then error({err = 'ERR batch script: a write before its key was read'}) end
  if cmd == 'HSET' then
    for i = 1, select('#', ...), 2 do
      local f, v = select(i, ...)
      e.h[f], e.set[f], e.dirty = v, true, true
    end
    return 0
  end
  if cmd == 'PEXPIREAT' then
    local t = ...
    -- every body's expiry is after now; one that is not would delete the
    -- key at once, which the view does not model
    if tonumber(t) <= batch_now then error({err = 'ERR batch script: an expiry not after now'}) end
    e.exp, e.dirty = t, true
    return 1
  end
  if cmd == 'PEXPIRETIME' then
    -- the expiry a hit of this batch set, not yet written back, else the
    -- key's own, read once
    if e.exp then return tonumber(e.exp) end
    if e.pexp == nil then e.pexp = redis.pcall('PEXPIRETIME', k) end
    return e.pexp
  end
  error({err = 'ERR batch script: ' .. tostring(cmd) .. ' outside its view'})
end
` + hitFunction("hit_fixed", bodyFixed, false) + hitFunction("hit_sliding", bodySliding, false) +
	hitFunction("hit_gcra", bodyGCRA, false) + hitFunction("view_fixed", bodyFixed, true) +
	hitFunction("view_sliding", bodySliding, true) + hitFunction("view_gcra", bodyGCRA, true) + `
local function failed(r)
  if type(r) == 'table' and r.err then return {err = r.err} end
  return {err = 'ERR ' .. tostring(r)}
end
local fns = {f = hit_fixed, s = hit_sliding, g = hit_gcra, F = view_fixed, S = view_sliding, G = view_gcra}
local out, o = {}, 0
for i = 1, #KEYS do
  cur = i
  local f, m = fns[ARGV[o + 1]], tonumber(ARGV[o + 2])
  local ok, r = pcall(f, KEYS[i], batch_now, unpack(ARGV, o + 3, o + 2 + m))
  o = o + 2 + m
  if not ok then r = {failed(r), 0, 0, 0, 0} end
  local j = 5 * (i - 1)
  out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] = r[1], r[2], r[3], r[4], r[5]
end
for _, k in ipairs(order) do
  local e = view[k]
  if e.dirty then
    local args = {}
    for f in pairs(e.set) do
      local v = e.h[f]
      if type(v) == 'number' then v = int(v) end
      args[#args + 1] = f
      args[#args + 1] = v
    end
    local ok, r = pcall(redis.call, 'HSET', k, unpack(args))
    if ok and e.exp then ok, r = pcall(redis.call, 'PEXPIREAT', k, int(e.exp)) end
    if not ok then
      for _, i in ipairs(e.hits) do
        local j = 5 * (i - 1)
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] = failed(r), 0, 0, 0, 0
      end
    end
  end
end
return out
`

// hitFunction is a hit script's body as a Lua function of its key, now
// and its arguments (ARGV[1] … ARGV[7] become a1 … a7); viewed, its
// commands go to luaBatch's view (kv), with the numbers they write left
// unformatted until the write-back.
func hitFunction(name, body string, viewed bool) string {
	r := strings.NewReplacer("local now = now_ms()\n", "",
		"ARGV[1]", "a1", "ARGV[2]", "a2", "ARGV[3]", "a3", "ARGV[4]", "a4", "ARGV[5]", "a5", "ARGV[6]", "a6", "ARGV[7]", "a7")
	f := r.Replace(body)
	if viewed {
		f = strings.NewReplacer("written(redis.call, int, ", "written(kv, num, ", "redis.call(", "kv(", "int(", "num(").Replace(f)
	}
	if strings.Contains(f, "now_ms") || strings.Contains(f, "ARGV") || strings.Contains(f, "KEYS") || viewed && strings.Contains(f, "redis.") {
		panic("redis: a hit script's body reads what luaBatch does not pass it")
	}
	return "local function " + name + "(key, now, a1, a2, a3, a4, a5, a6, a7)\n" + f + "end\n"
}

var (
	scriptFixed    = goredis.NewScript(luaFixed)
	scriptSliding  = goredis.NewScript(luaSliding)
	scriptGCRA     = goredis.NewScript(luaGCRA)
	scriptReset    = goredis.NewScript(luaReset)
	scriptTakeBack = goredis.NewScript(luaTakeBack)
	scriptClaim    = goredis.NewScript(luaClaim)
	scriptBatch    = goredis.NewScript(luaBatch)

	allScripts = []*goredis.Script{scriptFixed, scriptSliding, scriptGCRA, scriptReset, scriptTakeBack, scriptClaim, scriptBatch}

	// batchCodes name a hit script's body in luaBatch's ARGV, and
	// viewCodes its viewed one, for keys with several hits in the call.
	batchCodes = map[*goredis.Script]string{scriptFixed: "f", scriptSliding: "s", scriptGCRA: "g"}
	viewCodes  = map[*goredis.Script]string{scriptFixed: "F", scriptSliding: "S", scriptGCRA: "G"}

	// hitScripts are the add (and peek) scripts by driver.Rule's Algorithm.
	hitScripts = map[string]*goredis.Script{"fixed": scriptFixed, "sliding": scriptSliding, "gcra": scriptGCRA}
)
