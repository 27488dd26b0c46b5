--[[
Surge's job_submit.lua (JobSubmitPlugins=lua in slurm.conf, beside it): gives a `#DW jobdw`
or `#DW create_persistent` line without `pool=` the default pool, so that unmodified DataWarp
scripts (`#DW jobdw capacity=200GiB access_mode=striped type=scratch`) are accepted: Slurm's
burst_buffer/lua charges `capacity=` only against a named pool and refuses it otherwise.

The default pool is the first one Surge's manager lists (`surge bb pools`), as DataWarp's
`dw_wlm_cli --function pools` lists its default first. `surge` is found through
SURGE_COMMAND in slurmctld's environment, else on its PATH.
]]

local surge = os.getenv("SURGE_COMMAND") or "surge"

local function default_pool()
	local pipe = io.popen(surge .. " bb pools </dev/null 2>/dev/null", "r")
	if pipe == nil then
		return nil
	end
	local output = pipe:read("*a")
	pipe:close()
	return output:match('"id"%s*:%s*"([^"]+)"')
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local script = job_desc.script
	if script == nil or not script:find("#DW") then
		return slurm.SUCCESS
	end
	local pool = nil
	local lines = {}
	-- Every line, the last one too (a script need not end with a newline).
	for line in (script .. "\n"):gmatch("([^\n]*)\n") do
		local verb = line:match("^%s*#DW%s+(%S+)")
		if (verb == "jobdw" or verb == "create_persistent") and not line:find("pool=") then
			pool = pool or default_pool()
			if pool ~= nil then
				line = line .. " pool=" .. pool
			end
		end
		lines[#lines + 1] = line
	end
	job_desc.script = table.concat(lines, "\n")
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end
