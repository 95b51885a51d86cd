-- POST /checkout with a new Idempotency-Key per request, for the storefront:
-- "<run>-<thread>-<n>", where run (wrk argument 1) is unique to this wrk run.
wrk.method = "POST"
wrk.path = "/checkout"
wrk.body = '{"sku":"mug","qty":1}'
wrk.headers["Content-Type"] = "application/json"
local threads = 0

function setup(thread)
   thread:set("id", threads)
   threads = threads + 1
end

function init(args)
   prefix = (args[1] or "run") .. "-" .. id .. "-"
   n = 0
end

function request()
   n = n + 1
   return wrk.format(nil, nil, { ["Idempotency-Key"] = prefix .. n })
end
