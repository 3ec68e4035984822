module moldau.local/pause

go 1.24
