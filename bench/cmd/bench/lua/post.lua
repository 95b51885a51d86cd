-- A POST without an Idempotency-Key: the middleware lets it through.
wrk.method = "POST"
