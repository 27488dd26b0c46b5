--[[
Surge's script for Slurm's burst_buffer/lua plugin (BurstBufferType=burst_buffer/lua, with
Directive=DW in burst_buffer.conf so that `#DW` lines reach it unchanged). It lives beside
slurm.conf, and slurmctld reads it again at every call.

Every hook is a short-lived call of the `surge` command: the work is Surge's, the script only
passes it on (hooks must leave no process behind and must not block slurmctld).

State of this script: submit-time checking works (slurm_bb_job_process runs
`surge check-script`, and sbatch shows each problem with its line), after Slurm's own reading
of `capacity=` and `pool=` (22.05 refuses a capacity without a known pool itself, saying only
"Burst Buffer request invalid"). Pools, setup, staging, paths and teardown come with Surge's
control plane; until then a job with #DW lines that passes the check is held at setup with a
message saying so.

`surge` is found through SURGE_COMMAND in slurmctld's environment, else on its PATH.
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
	-- the shell prints it last.
	local pipe = io.popen(table.concat(words, " ") .. ' 2>&1; echo "surge-exit:$?"', "r")
	if pipe == nil then
		return false, "cannot run " .. surge
	end
	local output = pipe:read("*a")
	pipe:close()
	local status = output:match("surge%-exit:(%d+)%s*$")
	return status == "0", (output:gsub("surge%-exit:%d+%s*$", ""))
end

-- At submit, inside slurmctld: an error refuses the job, and sbatch shows the message.
function slurm_bb_job_process(job_script, ...)
	local ok, output = run_surge("check-script", job_script)
	if ok then
		return slurm.SUCCESS, ""
	end
	-- The CLI's message without its prefix and the name of Slurm's copy of the script: what
	-- is left names the script's problems by line.
	return slurm.ERROR, (output:gsub("^surge: [^:]+: ", "Surge: "):gsub("%s+$", ""))
end

local function not_yet(hook)
	return slurm.ERROR, "Surge: " .. hook .. " needs Surge's control plane, not installed with this version"
end

function slurm_bb_pools(...)
	return slurm.SUCCESS, '{"pools":[]}'
end

function slurm_bb_setup(...)
	return not_yet("setup")
end

function slurm_bb_data_in(...)
	return not_yet("stage-in")
end

function slurm_bb_test_data_in(...)
	return not_yet("stage-in")
end

function slurm_bb_real_size(...)
	return slurm.SUCCESS, ""
end

function slurm_bb_paths(...)
	return slurm.SUCCESS, ""
end

function slurm_bb_pre_run(...)
	return not_yet("pre-run")
end

function slurm_bb_post_run(...)
	return slurm.SUCCESS, ""
end

function slurm_bb_data_out(...)
	return not_yet("stage-out")
end

function slurm_bb_test_data_out(...)
	return not_yet("stage-out")
end

function slurm_bb_job_teardown(...)
	return slurm.SUCCESS, ""
end

function slurm_bb_get_status(...)
	return slurm.SUCCESS, "Surge: status comes with the control plane"
end
