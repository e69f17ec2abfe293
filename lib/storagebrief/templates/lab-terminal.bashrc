# JupyterLab's terminals on a storagebrief project (`make lab` = `storagebrief lab`): bash reads this instead of a
# login shell's files. It reads what a login shell reads, then puts the project's environment (STORAGEBRIEF_BIN,
# set by `storagebrief lab`) first on PATH: a login profile rebuilds PATH without it, and `storagebrief` was then
# "command not found" in the terminal (issue 48).
if [ -r /etc/profile ]; then . /etc/profile; fi
for profile in ~/.bash_profile ~/.bash_login ~/.profile; do
  if [ -r "$profile" ]; then . "$profile"; break; fi
done
unset profile
if [ -n "$STORAGEBRIEF_BIN" ]; then PATH="$STORAGEBRIEF_BIN:$PATH"; export PATH; fi
