-- Cost of one budgeted resume: a trivial handler that yields back to the host at once,
-- forever. The host resumes it many times, each resume with a fresh budget.
while true do
  coroutine.yield()
end
