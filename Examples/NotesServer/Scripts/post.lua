-- wrk: POST /notes with a new title each time, into the folder in $NOTES_FOLDER (none
-- when it is empty).
local counter = 0
local folder = os.getenv("NOTES_FOLDER") or ""

function setup(thread)
  thread:set("tid", tostring(math.random(1, 1000000)))
end

request = function()
  counter = counter + 1
  local member = ""
  if folder ~= "" then member = string.format(',"folder":"%s"', folder) end
  local body = string.format('{"title":"load %s-%d","body":"written by wrk","priority":%d%s}',
    tid or "0", counter, counter % 6, member)
  return wrk.format("POST", "/notes", { ["Content-Type"] = "application/json" }, body)
end
