#!/bin/bash
# csi-cmd.sh -- run by socat (csi-node.sh) for each connection of the host
# side: reads a shell script up to a line "__END__", runs it, and answers
# with its output (stdout and stderr) and a last line "__RC__ STATUS".
script=""
while IFS= read -r line; do
	[ "$line" = __END__ ] && break
	script+="$line"$'\n'
done
bash -c "$script" </dev/null 2>&1
echo "__RC__ $?"
