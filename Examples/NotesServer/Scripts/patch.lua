-- wrk: PATCH /notes/:id over the seeded notes listed in $NOTES_IDS (one key a line).
-- Each wrk thread takes its own slice of the notes and cycles through it, so two
-- requests in flight never patch the same note: with the `.error` merge policy a real
-- race on one note would (correctly) answer 409, and this run measures throughput.
local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", #threads)
  thread:set("nthreads", tonumber(os.getenv("WRK_THREADS") or "2"))
  table.insert(threads, thread)
end

local ids = nil

local function load_ids()
  ids = {}
  local index = 0
  for line in io.lines(os.getenv("NOTES_IDS")) do
    if index % nthreads == tid then table.insert(ids, line) end
    index = index + 1
  end
end

request = function()
  if ids == nil then load_ids() end
  counter = counter + 1
  local id = ids[(counter % #ids) + 1]
  local body = string.format('{"body":"patched %d","priority":%d}', counter, counter % 6)
  return wrk.format("PATCH", "/notes/" .. id, { ["Content-Type"] = "application/json" }, body)
end
