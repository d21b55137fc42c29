-- wrk: POST a 1 KiB body on every request (keep-alive).
wrk.method = "POST"
wrk.body = string.rep("x", 1024)
wrk.headers["Content-Type"] = "application/json"
