--[[
Surge's job_submit.lua (JobSubmitPlugins=lua in slurm.conf, beside it), for Slurm's
burst_buffer/lua plugin, which reads a job's `#DW` lines (Directive=DW) only after this runs.
Each job's burst-buffer text, its batch script and its `--bb` option (sbatch, salloc, srun:
job_desc.burst_buffer), goes through `surge bb job-submit`, which rewrites it line for line:

* Slurm's own `#BB create_persistent ...` and `#BB destroy_persistent ...` lines become the
  `#DW` lines Surge takes (the lua plugin hands `#BB` lines to nobody);
* a `--bb` option in DataWarp's short form (`capacity=1GiB access=striped`) becomes a
  `#DW jobdw` line;
* a `jobdw` or `create_persistent` line without `pool=` gets the default pool, so that
  unmodified DataWarp scripts are accepted: the plugin charges `capacity=` only against a
  named pool and refuses it otherwise. The default pool is the first one Surge's manager
  lists, as DataWarp's `dw_wlm_cli --function pools` lists its default first.

A job without nodes (-N0) that asks for a burst buffer is refused here with what to do instead
(`surge reservation create`): the plugin would refuse it without a word. Warnings (DataWarp
tuning Surge ignores) are shown to the user at submission.

Not for sites on Slurm's burst_buffer/datawarp plugin, which reads `#BB` lines itself and adds
the default pool. `surge` is found through SURGE_COMMAND in slurmctld's environment, else on
its PATH. Jobs without `#DW` or `#BB` lines (or --bb) are passed on without running anything.
]]

local surge = os.getenv("SURGE_COMMAND") or "surge"

-- Runs `surge ARGS...`; returns whether it succeeded and what it printed (stdout and stderr).
local function run_surge(...)
	local words = { surge }
	for _, arg in ipairs({ ... }) do
		-- Single-quoted for the shell: the only character to escape is the quote itself.
		words[#words + 1] = "'" .. tostring(arg):gsub("'", "'\\''") .. "'"
	end
	-- Lua 5.1's close() of a pipe does not tell the exit status: the shell prints it last.
	local pipe = io.popen(table.concat(words, " ") .. ' </dev/null 2>&1; echo "surge-exit:$?"', "r")
	if pipe == nil then
		return false, "cannot run " .. surge
	end
	local output = pipe:read("*a")
	pipe:close()
	local status = output:match("surge%-exit:(%d+)%s*$")
	return status == "0", (output:gsub("surge%-exit:%d+%s*$", ""))
end

local function read_file(path)
	local file = io.open(path, "rb")
	if file == nil then
		return nil
	end
	local text = file:read("*a")
	file:close()
	return text
end

-- `text` through `surge bb job-submit`: true and the new text, or false; and what it said
-- (warnings, or why it refused), without its "surge: " prefix.
local function rewrite(text, option, zero_nodes)
	local input, output = os.tmpname(), os.tmpname()
	local file = io.open(input, "wb")
	if file == nil then
		return false, nil, "Surge: cannot write " .. input
	end
	file:write(text)
	file:close()
	local args = { "bb", "job-submit", "--out", output }
	if option then
		args[#args + 1] = "--bb-option"
	end
	if zero_nodes then
		args[#args + 1] = "--zero-nodes"
	end
	args[#args + 1] = input
	local ok, said = run_surge((table.unpack or unpack)(args))
	local result = ok and read_file(output) or nil
	os.remove(input)
	os.remove(output)
	said = said:gsub("^surge: Surge", "Surge"):gsub("^surge: ", "Surge: "):gsub("%s+$", "")
	return ok and result ~= nil, result, said
end

local function asks_for_burst_buffer(text, option)
	if text == nil or text == "" then
		return false
	end
	-- A --bb option may be DataWarp's short form, without a directive.
	return option or text:find("#DW") ~= nil or text:find("#BB") ~= nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local zero_nodes = job_desc.min_nodes == 0
	local told = {}
	for _, field in ipairs({ "script", "burst_buffer" }) do
		local option = field == "burst_buffer"
		local text = job_desc[field]
		if asks_for_burst_buffer(text, option) then
			local ok, result, said = rewrite(text, option, zero_nodes)
			if not ok then
				if not said:match("^Surge") then
					said = "Surge: " .. said
				end
				slurm.log_user("%s", said)
				return slurm.ERROR
			end
			if result ~= text then
				job_desc[field] = result
			end
			if said ~= "" then
				told[#told + 1] = said
			end
		end
	end
	if #told > 0 then
		slurm.log_user("%s", table.concat(told, "\n"))
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end
