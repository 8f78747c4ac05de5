/* nbdkit-cairn-plugin: ending idle NBD connections when nbdkit quits
 * (plugin/stop.c).
 */
#ifndef CAIRN_PLUGIN_STOP_H
#define CAIRN_PLUGIN_STOP_H

/* Start watching for nbdkit's quit (from .after_fork, before the plugin
 * opens any listening socket of its own); 0 or -1 after nbdkit_error.
 */
int stop_watch_start (void);

/* Stop the watch (from .cleanup); nothing if it never started. */
void stop_watch_end (void);

#endif /* CAIRN_PLUGIN_STOP_H */
