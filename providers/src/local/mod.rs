//! The `local` provider: kinds whose objects live on this machine or nowhere at all
//! (files, random ids, pauses). They need no `[providers.local]` configuration.

pub mod duration;
pub mod file;
pub mod random_id;
pub mod time_sleep;

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_registers_every_local_kind_under_the_local_provider() {
        let registry = crate::registry::builtin();
        for name in ["local_file", "random_id", "time_sleep"] {
            let kind = registry.get(name).expect("every local kind is registered");
            assert_eq!(kind.provider(), "local", "{name}");
        }
    }
}
