--[[
Surge's script for Slurm's burst_buffer/lua plugin (BurstBufferType=burst_buffer/lua, with
Directive=DW in burst_buffer.conf so that `#DW` lines reach it unchanged). It lives beside
slurm.conf, and slurmctld reads it again at every call.

Every hook is one short call of `surge bb <hook>`, a client of Surge's manager (surge-manager),
which does the work: the script passes the hook on and hands Slurm the answer. Hooks must leave
no process behind and must not block slurmctld; the manager runs the stages, never the hook.

One file serves Slurm 22.05 (tested) through 25.x: newer versions pass uid and gid to more
hooks (used when present) and require slurm_bb_test_data_in / _out (defined).

`surge` is found through SURGE_COMMAND in slurmctld's environment, else on its PATH; the
manager's socket through SURGE_MANAGER_SOCKET (default /run/surge/manager.sock).
]]

local surge = os.getenv("SURGE_COMMAND") or "surge"

-- Runs `surge ARGS...`; returns whether it succeeded and what it printed (stdout and stderr).
local function run_surge(...)
	local words = { surge }
	for _, arg in ipairs({ ... }) do
		-- Single-quoted for the shell: the only character to escape is the quote itself.
		words[#words + 1] = "'" .. tostring(arg):gsub("'", "'\\''") .. "'"
	end
	-- Slurm 22.05 links Lua 5.1, whose close() of a pipe does not tell the exit status:
	-- the shell prints it last. stdin from /dev/null: nothing of slurmctld's is inherited.
	local pipe = io.popen(table.concat(words, " ") .. ' </dev/null 2>&1; echo "surge-exit:$?"', "r")
	if pipe == nil then
		return false, "cannot run " .. surge
	end
	local output = pipe:read("*a")
	pipe:close()
	local status = output:match("surge%-exit:(%d+)%s*$")
	return status == "0", (output:gsub("surge%-exit:%d+%s*$", ""))
end

-- The CLI's error without its "surge: " prefix (and without the name of Slurm's copy of the
-- script, which says nothing to the user), trimmed.
local function message(output)
	return (output:gsub("^surge: [^:]*/script: ", ""):gsub("^surge: ", "Surge: "):gsub("%s+$", ""))
end

-- A hook's answer: SUCCESS, or ERROR with the words Slurm shows in the job's reason.
local function answer(ok, output)
	if ok then
		return slurm.SUCCESS, ""
	end
	local why = message(output)
	if not why:match("^Surge") then
		why = "Surge: " .. why
	end
	return slurm.ERROR, why
end

-- At submit, inside slurmctld: an error refuses the job, and sbatch shows the message.
-- 23.02+ pass the submitting user and group, which lets the use of reservations (their owner's,
-- or shared with that user or group) be checked here too.
function slurm_bb_job_process(job_script, uid, gid, job_info)
	if uid ~= nil and gid ~= nil then
		return answer(run_surge("bb", "job-process", "--uid", uid, "--gid", gid, job_script))
	end
	if uid ~= nil then
		return answer(run_surge("bb", "job-process", "--uid", uid, job_script))
	end
	return answer(run_surge("bb", "job-process", job_script))
end

-- Inside slurmctld, at start and every 30 s: quantities and free space in units of granularity.
function slurm_bb_pools()
	local ok, output = run_surge("bb", "pools")
	if not ok then
		slurm.log_error("Surge: pools: %s", message(output))
		return slurm.ERROR, ""
	end
	return slurm.SUCCESS, output
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script, job_info)
	return answer(run_surge("bb", "setup", "--job", job_id, "--uid", uid, "--gid", gid, job_script))
end

-- Slurm 22.05 waits for this hook (StageInTimeout): it returns once the stage-in is done.
function slurm_bb_data_in(job_id, job_script, uid, gid, job_info)
	return answer(run_surge("bb", "data-in", "--job", job_id))
end

-- Slurm 24.05+ polls these while they answer BUSY.
local function test_stages(hook, job_id)
	local ok, output = run_surge("bb", hook, "--job", job_id)
	if ok and output:match("BUSY") then
		return slurm.SUCCESS, slurm.SLURM_BB_BUSY
	end
	return answer(ok, output)
end

function slurm_bb_test_data_in(job_id, job_script, uid, gid, job_info)
	return test_stages("test-data-in", job_id)
end

function slurm_bb_real_size(job_id, uid, gid, job_info)
	return slurm.SUCCESS, ""
end

-- Inside slurmctld: the variables (DW_JOB_STRIPED ...) every step of the job gets.
function slurm_bb_paths(job_id, job_script, path_file, uid, gid, job_info)
	return answer(run_surge("bb", "paths", "--job", job_id, "--path-file", path_file))
end

-- The job's nodes are known: buffers on them start, stage-ins deferred for them run.
function slurm_bb_pre_run(job_id, job_script, uid, gid, job_info)
	return answer(run_surge("bb", "pre-run", "--job", job_id))
end

function slurm_bb_post_run(job_id, job_script, uid, gid, job_info)
	return answer(run_surge("bb", "post-run", "--job", job_id))
end

-- Waits for the stage-out (StageOutTimeout); a failure keeps the job's buffer and data.
function slurm_bb_data_out(job_id, job_script, uid, gid, job_info)
	return answer(run_surge("bb", "data-out", "--job", job_id))
end

function slurm_bb_test_data_out(job_id, job_script, uid, gid, job_info)
	return test_stages("test-data-out", job_id)
end

function slurm_bb_job_teardown(job_id, job_script, hurry, uid, gid)
	if hurry == "true" or hurry == true then
		return answer(run_surge("bb", "teardown", "--job", job_id, "--hurry"))
	end
	return answer(run_surge("bb", "teardown", "--job", job_id))
end

-- Whether this Slurm passes slurm_bb_get_status the caller's uid and gid before the words
-- (23.02 and later; 22.05 passes the words alone, and then who asks is not known: the words
-- cannot say, a user may type any number). The version is asked of the program running this
-- script (slurmctld, or its slurmscriptd: `-V` needs no configuration, unlike scontrol's),
-- else of the slurmctld on the PATH.
local function status_gets_caller()
	local pipe = io.popen('{ "$(readlink /proc/$PPID/exe)" -V || slurmctld -V; } </dev/null 2>/dev/null', "r")
	if pipe == nil then
		return false
	end
	local version = pipe:read("*a") or ""
	pipe:close()
	local major = tonumber(version:match("(%d+)%.%d+"))
	return major ~= nil and major >= 23
end

-- `scontrol show bbstat [WORDS]`: Surge's pools, nodes, instances, servers, sessions and
-- stages (`surge bb status` says which words choose what). The hook runs as SlurmUser, whom
-- the manager trusts, so it names the user who asked: the manager then shows only that user's
-- sessions and stages. Where Slurm does not say who asked (22.05), no one's are shown.
function slurm_bb_get_status(...)
	local args = { ... }
	local command = { "bb", "status" }
	if status_gets_caller() then
		command[#command + 1] = "--uid"
		command[#command + 1] = args[1]
		table.remove(args, 1) -- uid
		table.remove(args, 1) -- gid
	else
		command[#command + 1] = "--unknown-caller"
	end
	command[#command + 1] = "--"
	for _, word in ipairs(args) do
		command[#command + 1] = word
	end
	local ok, output = run_surge((table.unpack or unpack)(command))
	if ok then
		return slurm.SUCCESS, output
	end
	return slurm.ERROR, message(output)
end
