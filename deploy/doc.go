// Package deploy holds the files docker-compose.yml mounts (the processor's
// configuration, the topic-creation script) and, in its tests, the static
// checks of the compose stack and the Dockerfile: no Docker engine runs where
// this project is built, so what can be checked without one is checked here.
package deploy
