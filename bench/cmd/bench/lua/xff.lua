-- Many client keys: every request comes from a random address among the
-- first N (wrk argument 1, at most 131072) of 198.18.0.0/15, the range set
-- aside for benchmarks, in X-Forwarded-For as one trusted proxy sets it.
local threads = 0

function setup(thread)
   thread:set("id", threads)
   threads = threads + 1
end

function init(args)
   space = tonumber(args[1]) or 131072
   math.randomseed(os.time() * 1009 + id * 7919)
end

function request()
   local i = math.random(0, space - 1)
   local ip = string.format("198.%d.%d.%d", 18 + math.floor(i / 65536), math.floor(i / 256) % 256, i % 256)
   return wrk.format(nil, nil, { ["X-Forwarded-For"] = ip })
end
