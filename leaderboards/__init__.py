"""Reference rows for ``nfeval leaderboard --reference NAME`` (``reference/NAME.json``), shipped as
package data of ``nfeval.leaderboards``; the format is in this folder's README.md."""
