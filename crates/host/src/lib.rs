//! farflash-host (being written)
