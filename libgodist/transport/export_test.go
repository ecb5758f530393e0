package transport

// The sizes fold_test.go (package transport_test) cuts its messages by.
const (
	FoldWindow = foldWindow
	PartSize   = partSize
)
