-- A POST whose Idempotency-Key cycles through a fixed set, "<prefix><i>" for
-- i below count (wrk arguments 1 and 2), whose responses the harness stored
-- before the run: every request is a replay.
wrk.method = "POST"
local reqs = {}
local n = 0

function init(args)
   local prefix, count = args[1], tonumber(args[2])
   for i = 0, count - 1 do
      reqs[#reqs + 1] = wrk.format(nil, nil, { ["Idempotency-Key"] = prefix .. i })
   end
end

function request()
   n = n % #reqs + 1
   return reqs[n]
end
