-- Objects: an operating-system scheduler simulation. Task objects of four kinds (idle,
-- worker, handler, device) with priorities, and packets passed between them through
-- linked queues; the scheduler runs the most urgent ready task, through a method call,
-- until every task waits or is held.
local Packet = {}
Packet.__index = Packet
local function packet(dest, kind)
  return setmetatable({ link = nil, dest = dest, kind = kind, datum = 1, data = { 0, 0, 0, 0 } },
    Packet)
end

-- Appends a packet to a linked queue; returns the queue's head.
local function append(queue, p)
  p.link = nil
  if queue == nil then return p end
  local q = queue
  while q.link do q = q.link end
  q.link = p
  return queue
end

local Task = {}
Task.__index = Task
function Task:ready() return not self.held and (not self.waiting or self.queue ~= nil) end

local Scheduler = {}
Scheduler.__index = Scheduler
local function scheduler()
  return setmetatable({ tasks = {}, order = {}, current = nil, sent = 0, holds = 0 }, Scheduler)
end

function Scheduler:add(id, priority, behaviour, state, waiting)
  local t = setmetatable({ id = id, priority = priority, queue = nil, run = behaviour,
    state = state, waiting = waiting, held = false, sched = self }, Task)
  self.tasks[id] = t
  local order = self.order
  local i = #order + 1
  while i > 1 and order[i - 1].priority < priority do
    order[i] = order[i - 1]
    i = i - 1
  end
  order[i] = t
  return t
end

function Scheduler:run()
  local order = self.order
  while true do
    local task
    for i = 1, #order do
      if order[i]:ready() then task = order[i] break end
    end
    if not task then return end
    self.current = task
    local p = task.queue
    if p and task.waiting then
      task.queue = p.link
      task.waiting = false
      task:run(p)
    else
      task:run(nil)
    end
  end
end

function Scheduler:send(p, to)
  local t = self.tasks[to]
  self.sent = self.sent + 1
  p.dest = self.current.id
  t.queue = append(t.queue, p)
end

function Scheduler:release(id) self.tasks[id].held = false end
function Scheduler:hold()
  self.holds = self.holds + 1
  self.current.held = true
end

local IDLE, WORKER, HANDLER_A, HANDLER_B, DEVICE_A, DEVICE_B = 1, 2, 3, 4, 5, 6
local WORK, DEVICE = 1, 2

-- Idle: counts down, waking a device each time (which one: a shift register's low bit).
function Task.idle(self)
  local s = self.state
  s.count = s.count - 1
  if s.count == 0 then return self.sched:hold() end
  if s.control % 2 == 0 then
    s.control = s.control / 2
    self.sched:release(DEVICE_A)
  else
    s.control = bit.bxor((s.control - 1) / 2, 0xD008)
    self.sched:release(DEVICE_B)
  end
end

-- Worker: fills each work packet it gets and sends it to the handlers in turn.
function Task.worker(self, p)
  local s = self.state
  if p == nil then self.waiting = true return end
  s.dest = s.dest == HANDLER_A and HANDLER_B or HANDLER_A
  p.datum = 1
  for i = 1, 4 do
    s.count = s.count % 26 + 1
    p.data[i] = 64 + s.count
  end
  self.sched:send(p, s.dest)
end

-- Handler: pairs work packets with device packets: each datum of a work packet goes to
-- the device in a device packet; a finished work packet goes back to the worker.
function Task.handler(self, p)
  local s = self.state
  if p then
    if p.kind == WORK then s.work = append(s.work, p) else s.device = append(s.device, p) end
  end
  local w = s.work
  if w then
    if w.datum > 4 then
      s.work = w.link
      return self.sched:send(w, WORKER)
    end
    local d = s.device
    if d then
      s.device = d.link
      d.datum = w.data[w.datum]
      w.datum = w.datum + 1
      return self.sched:send(d, s.device_id)
    end
  end
  self.waiting = true
end

-- Device: holds a packet until the idle task wakes it, then returns it to its handler.
function Task.device(self, p)
  local s = self.state
  if p then
    s.pending = p
    s.sum = s.sum + p.datum
    return self.sched:hold()
  end
  local v = s.pending
  if v == nil then self.waiting = true return end
  s.pending = nil
  self.sched:send(v, v.dest)
end

local function simulate(count)
  local sched = scheduler()
  sched:add(IDLE, 0, Task.idle, { control = 1, count = count }, false)
  sched:add(WORKER, 1000, Task.worker, { dest = HANDLER_A, count = 0 }, true)
  sched:add(HANDLER_A, 2000, Task.handler, { device_id = DEVICE_A }, true)
  sched:add(HANDLER_B, 3000, Task.handler, { device_id = DEVICE_B }, true)
  local da = sched:add(DEVICE_A, 4000, Task.device, { sum = 0 }, true)
  local db = sched:add(DEVICE_B, 5000, Task.device, { sum = 0 }, true)
  for _ = 1, 2 do sched.tasks[WORKER].queue = append(sched.tasks[WORKER].queue, packet(0, WORK)) end
  for _ = 1, 3 do
    sched.tasks[HANDLER_A].queue = append(sched.tasks[HANDLER_A].queue, packet(0, DEVICE))
    sched.tasks[HANDLER_B].queue = append(sched.tasks[HANDLER_B].queue, packet(0, DEVICE))
  end
  sched:run()
  return sched.sent + sched.holds + da.state.sum + db.state.sum
end

local total = 0
for round = 1, 8 do total = total + simulate(5000 * round) end
assert(total == 13576427, total)
return total
