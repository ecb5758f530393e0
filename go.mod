module github.com/godist/godist

go 1.26
