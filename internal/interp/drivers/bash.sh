# Airlock code-context driver for bash.
#
# Started by the daemon as `bash --noprofile --norc -c <this file>` with
# stdin open. The first line on stdin is the frame nonce; each command
# after it is a header line "ID NENV", NENV "NAME=VALUE" strings each ended
# by a NUL byte, and the code ended by a NUL byte. The code is sourced in this shell, so variables, functions, the
# working directory and options persist between cells. Output is raw on
# fds 1 and 2; the end of a cell is a frame on both:
# "\x1e" NONCE " " JSON "\n". An interrupt (SIGINT to the process group)
# stops the foreground command and, through the DEBUG trap, unwinds the
# cell's functions and the sourced code. `exit` in a cell ends the cell
# with that status, not the shell (`builtin exit` ends the shell).
unset AIRLOCK_INTERP_MAX_OUTPUT AIRLOCK_INTERP_MAX_TEXT AIRLOCK_INTERP_MAX_IMAGE
exec {__airlock_in}<&0 </dev/null
# The nonce is the first line on stdin, never in the environment (see
# drivers.go). It is not exported.
IFS= read -r -u "$__airlock_in" __airlock_nonce || builtin exit 2
[[ $__airlock_nonce =~ ^[0-9a-f]+$ ]] || builtin exit 2
__airlock_two() { return 2; }
shopt -s extdebug
set -T
__airlock_depth=${#BASH_SOURCE[@]}
__airlock_int=
__airlock_exit=
__airlock_incell=
exit() {
	if ((BASH_SUBSHELL > 0)) || [[ -z $__airlock_incell ]]; then
		builtin exit "$@"
	fi
	__airlock_exit=${1:-$?}
	return "$__airlock_exit"
}
trap '[[ -z $__airlock_int$__airlock_exit ]] || (( ${#BASH_SOURCE[@]} <= __airlock_depth )) || __airlock_two' DEBUG
printf '\036%s {"t":"ready","lang":"bash","version":"%s","pid":%d}\n' "$__airlock_nonce" "$BASH_VERSION" "$$"
while :; do
	# Between cells an interrupt is ignored: it must not cut a command
	# short while it is being read.
	trap '' INT
	IFS=' ' read -r -u "$__airlock_in" __airlock_id __airlock_nenv || break
	[[ $__airlock_id =~ ^[0-9]+$ && $__airlock_nenv =~ ^[0-9]+$ ]] || continue
	__airlock_saved=()
	for ((__airlock_i = 0; __airlock_i < __airlock_nenv; __airlock_i++)); do
		IFS= read -r -d '' -u "$__airlock_in" __airlock_kv
		__airlock_k=${__airlock_kv%%=*}
		if [[ -v $__airlock_k ]]; then
			__airlock_saved+=("$__airlock_k" 1 "${!__airlock_k}")
		else
			__airlock_saved+=("$__airlock_k" 0 "")
		fi
		export -- "$__airlock_kv"
	done
	IFS= read -r -d '' -u "$__airlock_in" __airlock_code
	__airlock_int= __airlock_exit= __airlock_incell=1
	trap '__airlock_int=1' INT
	source <(printf '%s\n' "$__airlock_code")
	__airlock_rc=$?
	[[ -z $__airlock_exit ]] || __airlock_rc=$__airlock_exit
	[[ -z $__airlock_int ]] || __airlock_rc=130
	__airlock_int= __airlock_exit= __airlock_incell=
	for ((__airlock_i = 0; __airlock_i < ${#__airlock_saved[@]}; __airlock_i += 3)); do
		if [[ ${__airlock_saved[__airlock_i + 1]} == 1 ]]; then
			export -- "${__airlock_saved[__airlock_i]}=${__airlock_saved[__airlock_i + 2]}"
		else
			unset -v "${__airlock_saved[__airlock_i]}"
		fi
	done
	printf '\036%s {"t":"end","id":%s,"code":%d}\n' "$__airlock_nonce" "$__airlock_id" "$__airlock_rc"
	printf '\036%s {"t":"end","id":%s,"code":%d}\n' "$__airlock_nonce" "$__airlock_id" "$__airlock_rc" >&2
done
exit 0
